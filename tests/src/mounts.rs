//! Guards for the kernel-side pieces of the filesystem tests: an nbdfuse FUSE file, a loop
//! device on it, a mount on that. Each undoes itself in `Drop`, also on panic, and never panics
//! there (a failed undo is printed; the next step still runs).
//!
//! Declare them in creation order so they drop in reverse: mount, then loop device, then FUSE.
//! Hold [`serial`] around all of it: loop devices and `/dev/fuse` are machine-wide.

use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::daemon::{signal, wait_timeout};
use crate::{run, run_ok, tool};

/// Lock file that serialises device-using tests across test processes.
const LOCK_FILE: &str = "/tmp/ftld-e2e-devices.lock";

static IN_PROCESS: Mutex<()> = Mutex::new(());

/// Held while a test uses loop devices, FUSE or mounts: one such test at a time on the machine
/// (a mutex inside this process plus `flock` on a file across processes).
pub struct Serial {
    _file: File,
    _guard: MutexGuard<'static, ()>,
}

/// Takes the machine-wide device lock (waits for it).
pub fn serial() -> Serial {
    let guard = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_FILE)
        .unwrap_or_else(|e| panic!("opening {LOCK_FILE}: {e}"));
    // SAFETY: flock on a valid open descriptor; the lock is released when `file` is closed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(
        rc,
        0,
        "flock {LOCK_FILE}: {}",
        std::io::Error::last_os_error()
    );
    Serial {
        _file: file,
        _guard: guard,
    }
}

/// `nbdfuse MOUNTPOINT/disk URI`: the export as a regular file `MOUNTPOINT/disk`.
pub struct Nbdfuse {
    mountpoint: PathBuf,
    child: Option<Child>,
}

impl Nbdfuse {
    /// Mounts `uri` at `mountpoint` (created if missing) and waits until `disk` is there.
    pub fn start(mountpoint: &Path, uri: &str) -> Nbdfuse {
        std::fs::create_dir_all(mountpoint).expect("creating the nbdfuse mountpoint");
        let pidfile = mountpoint.with_extension("pid");
        let log = mountpoint.with_extension("log");
        let _ = std::fs::remove_file(&pidfile);
        let child = tool("nbdfuse")
            .arg("-P")
            .arg(&pidfile)
            .arg(mountpoint.join("disk"))
            .arg(uri)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("creating the nbdfuse log"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start nbdfuse: {e}"));
        let mut g = Nbdfuse {
            mountpoint: mountpoint.to_path_buf(),
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = std::fs::read_to_string(&pidfile).is_ok_and(|s| !s.trim().is_empty())
                && g.file().exists();
            if ready {
                return g;
            }
            if let Some(Ok(Some(status))) = g.child.as_mut().map(Child::try_wait) {
                g.child = None;
                panic!(
                    "nbdfuse exited with {status}: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "nbdfuse not ready after 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The FUSE file that is the export.
    pub fn file(&self) -> PathBuf {
        self.mountpoint.join("disk")
    }
}

impl Drop for Nbdfuse {
    fn drop(&mut self) {
        let out = run(tool("fusermount3").arg("-u").arg(&self.mountpoint));
        if !out.status.success() {
            eprintln!(
                "fusermount3 -u {} failed: {}; trying umount -l",
                self.mountpoint.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            let _ = run(tool("umount").arg("-l").arg(&self.mountpoint));
        }
        if let Some(mut c) = self.child.take() {
            if wait_timeout(&mut c, Duration::from_secs(30)).is_none() {
                eprintln!("nbdfuse did not exit after unmount; killing it");
                signal(c.id(), libc::SIGKILL);
                let _ = c.wait();
            }
        }
    }
}

/// `losetup -f --show FILE`.
pub struct LoopDev {
    dev: PathBuf,
}

impl LoopDev {
    /// Attaches `file` to a free loop device.
    pub fn attach(file: &Path) -> LoopDev {
        Self::attach_with(file, &[])
    }

    /// Attaches `file` with more `losetup` options (e.g. `--direct-io=on`).
    pub fn attach_with(file: &Path, opts: &[&str]) -> LoopDev {
        let out = run_ok(tool("losetup").args(["-f", "--show"]).args(opts).arg(file));
        LoopDev {
            dev: PathBuf::from(out.trim()),
        }
    }

    /// The device node, e.g. `/dev/loop3`.
    pub fn dev(&self) -> &Path {
        &self.dev
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        for attempt in 0..50 {
            let out = run(tool("losetup").arg("-d").arg(&self.dev));
            if out.status.success() {
                return;
            }
            if attempt == 49 {
                eprintln!(
                    "losetup -d {} failed: {}",
                    self.dev.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `mount DEV TARGET` (target created if missing).
pub struct Mount {
    target: PathBuf,
}

impl Mount {
    /// Mounts `dev` on `target`.
    pub fn new(dev: &Path, target: &Path) -> Mount {
        std::fs::create_dir_all(target).expect("creating the mount point");
        run_ok(tool("mount").arg(dev).arg(target));
        Mount {
            target: target.to_path_buf(),
        }
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.target
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        for _ in 0..50 {
            if run(tool("umount").arg(&self.target)).status.success() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!(
            "umount {} keeps failing; detaching lazily",
            self.target.display()
        );
        let _ = run(tool("umount").arg("-l").arg(&self.target));
    }
}
