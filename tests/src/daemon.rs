//! [`Daemon`]: the real `ftld serve` in a temporary directory, as a guard.
//!
//! Ready means the control socket answers a ping; the daemon binds its NBD sockets before the
//! control socket, so by then NBD clients can connect. `Drop` sends SIGTERM and waits (then
//! SIGKILL), so no daemon outlives its test; [`Daemon::stop`] does the same and returns the exit
//! status for the test to check. The daemon's stderr is appended to `ftld.log` in its directory
//! (across restarts) and printed when it dies unexpectedly.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How to start the daemon. [`DaemonOpts::default`] is a small, fast device.
#[derive(Clone, Debug)]
pub struct DaemonOpts {
    /// `--preset`.
    pub preset: String,
    /// `--capacity`.
    pub capacity: String,
    /// `--timing`.
    pub timing: String,
    /// More arguments for `ftld serve`.
    pub extra: Vec<String>,
    /// How long to wait for readiness.
    pub ready_timeout: Duration,
}

impl Default for DaemonOpts {
    fn default() -> Self {
        Self {
            preset: "slc-small-004".into(),
            capacity: "64M".into(),
            timing: "off".into(),
            extra: Vec::new(),
            ready_timeout: Duration::from_secs(60),
        }
    }
}

/// A running `ftld serve` on `DIR/x.img`, NBD socket `DIR/s.sock`, control socket `DIR/x.ctl`.
pub struct Daemon {
    bin: PathBuf,
    opts: DaemonOpts,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Daemon {
    /// Starts `ftld serve` (binary `bin`) with default options in a new temp directory.
    pub fn start(bin: impl AsRef<Path>) -> Daemon {
        Self::start_with(bin, DaemonOpts::default())
    }

    /// Starts `ftld serve` with `opts` in a new temp directory and waits until it is ready.
    pub fn start_with(bin: impl AsRef<Path>, opts: DaemonOpts) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("ftld-e2e-")
            .tempdir()
            .expect("creating a temp dir");
        let mut d = Daemon {
            bin: bin.as_ref().to_path_buf(),
            opts,
            dir,
            child: None,
        };
        d.restart();
        d
    }

    /// Starts the daemon again on the same image (after [`Daemon::stop`] or
    /// [`Daemon::kill9`]) and waits until it is ready.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "daemon is still running");
        let child = self
            .serve_command()
            .stdin(Stdio::null())
            .stdout(Stdio::from(self.log_file()))
            .stderr(Stdio::from(self.log_file()))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        self.child = Some(child);
        self.wait_ready();
    }

    /// The options the next [`Daemon::restart`] runs with.
    pub fn opts_mut(&mut self) -> &mut DaemonOpts {
        &mut self.opts
    }

    /// The `ftld serve ...` command this guard runs (for starting a second daemon by hand).
    pub fn serve_command(&self) -> Command {
        let mut c = Command::new(&self.bin);
        // These tests drive NBD clients: never let `auto` pick ublk on a host that has it.
        c.arg("serve")
            .args(["--frontend", "nbd"])
            .arg("--image")
            .arg(self.image())
            .arg("--nbd-socket")
            .arg(self.socket())
            .args(["--timing", &self.opts.timing])
            .args(["--preset", &self.opts.preset])
            .args(["--capacity", &self.opts.capacity])
            .args(&self.opts.extra)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            );
        c
    }

    /// An `ftld` command (any subcommand) with the same binary.
    pub fn ftld(&self) -> Command {
        Command::new(&self.bin)
    }

    fn log_file(&self) -> File {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("opening the daemon log")
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + self.opts.ready_timeout;
        loop {
            if let Some(status) = self.child_mut().try_wait().expect("try_wait") {
                self.child = None;
                panic!(
                    "ftld serve exited with {status} before it was ready\n--- log\n{}",
                    self.log()
                );
            }
            if self.ping() {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "ftld serve not ready after {:?}\n--- log\n{}",
                    self.opts.ready_timeout,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the control socket answers `{"cmd":"ping"}`.
    pub fn ping(&self) -> bool {
        let Ok(mut s) = UnixStream::connect(self.control_socket()) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        if s.write_all(b"{\"cmd\":\"ping\"}\n").is_err() {
            return false;
        }
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).is_ok() && line.contains("\"ok\":true")
    }

    fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("daemon is not running")
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("daemon is not running").id()
    }

    /// Sends SIGTERM and waits (60 s at most, then SIGKILL and panic) for the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        self.stop_with(libc::SIGTERM)
    }

    /// Sends `sig` (SIGTERM, SIGINT) and waits as [`Daemon::stop`] does.
    pub fn stop_with(&mut self, sig: libc::c_int) -> ExitStatus {
        let pid = self.pid();
        signal(pid, sig);
        let status = wait_timeout(self.child_mut(), Duration::from_secs(60));
        match status {
            Some(s) => {
                self.child = None;
                s
            }
            None => {
                let _ = self.child_mut().kill();
                let _ = self.child_mut().wait();
                self.child = None;
                panic!(
                    "ftld did not exit within 60 s of signal {sig}\n--- log\n{}",
                    self.log()
                );
            }
        }
    }

    /// Kills the daemon with SIGKILL (a power cut of the emulated SSD) and reaps it.
    pub fn kill9(&mut self) {
        let c = self.child_mut();
        let _ = c.kill();
        let _ = c.wait();
        self.child = None;
    }

    /// Whether the daemon process is running.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => c.try_wait().ok().flatten().is_none(),
            None => false,
        }
    }

    /// The temp directory holding image, sockets and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The image file.
    pub fn image(&self) -> PathBuf {
        self.dir().join("x.img")
    }

    /// The NBD unix socket.
    pub fn socket(&self) -> PathBuf {
        self.dir().join("s.sock")
    }

    /// The control socket (the daemon's default: the image with extension `.ctl`).
    pub fn control_socket(&self) -> PathBuf {
        self.dir().join("x.ctl")
    }

    /// The NBD URI of the export.
    pub fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.socket().display())
    }

    /// Path of the log (the daemon's stdout and stderr).
    pub fn log_path(&self) -> PathBuf {
        self.dir().join("ftld.log")
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// `ftld stats` as JSON (panics if the command fails).
    pub fn stats(&self) -> serde_json::Value {
        let out = crate::run_ok(
            self.ftld()
                .arg("stats")
                .arg("--control-socket")
                .arg(self.control_socket()),
        );
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("ftld stats printed bad JSON: {e}\n{out}"))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let Some(child) = &mut self.child else { return };
        signal(child.id(), libc::SIGTERM);
        if wait_timeout(child, Duration::from_secs(30)).is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill has no memory-safety preconditions; a stale pid only yields ESRCH.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Waits for `child` to exit, at most `limit`.
pub fn wait_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
