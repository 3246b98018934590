//! systemd readiness: `ftld serve` (NBD, timing off) with `NOTIFY_SOCKET` pointing at a unix
//! datagram socket this test listens on. READY=1 must come only once the export accepts
//! connections: the test connects the moment READY arrives and completes an NBD handshake.
//! STATUS= comes with it, WATCHDOG=1 pings follow (WATCHDOG_USEC set), and SIGTERM produces
//! STOPPING=1 before a clean exit.

use std::io::{Read, Write};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the daemon if the test fails half-way.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Receives datagrams until one contains `want` (returns it) or `timeout` passes.
fn wait_for(sock: &UnixDatagram, want: &str, timeout: Duration, seen: &mut Vec<String>) -> String {
    let end = Instant::now() + timeout;
    let mut buf = [0u8; 4096];
    while Instant::now() < end {
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        if let Ok(n) = sock.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            seen.push(msg.clone());
            if msg.lines().any(|l| l == want) {
                return msg;
            }
        }
    }
    panic!("no {want} within {timeout:?}; got {seen:?}");
}

/// Fixed-newstyle NBD handshake up to the transmission phase, then a clean disconnect.
fn nbd_handshake(path: &Path) {
    let mut s = UnixStream::connect(path).expect("NBD socket accepts a connection");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut greet = [0u8; 18];
    s.read_exact(&mut greet).expect("server greeting");
    assert_eq!(&greet[..8], b"NBDMAGIC");
    assert_eq!(&greet[8..16], b"IHAVEOPT");
    // Client flags: FIXED_NEWSTYLE | NO_ZEROES.
    s.write_all(&3u32.to_be_bytes()).expect("client flags");
    // NBD_OPT_EXPORT_NAME "ftld".
    let name = b"ftld";
    let mut opt = Vec::new();
    opt.extend_from_slice(b"IHAVEOPT");
    opt.extend_from_slice(&1u32.to_be_bytes());
    opt.extend_from_slice(&(name.len() as u32).to_be_bytes());
    opt.extend_from_slice(name);
    s.write_all(&opt).expect("export name");
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).expect("export size and flags");
    let size = u64::from_be_bytes(reply[..8].try_into().expect("8 bytes"));
    assert_eq!(size, 64 << 20, "the export has the capacity asked for");
    // NBD_CMD_DISC.
    let mut disc = Vec::new();
    disc.extend_from_slice(&0x2560_9513u32.to_be_bytes());
    disc.extend_from_slice(&0u16.to_be_bytes());
    disc.extend_from_slice(&2u16.to_be_bytes());
    disc.extend_from_slice(&[0u8; 8 + 8 + 4]);
    s.write_all(&disc).expect("disconnect");
}

#[test]
fn ready_after_export_is_live_and_stopping_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let notify_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&notify_path).expect("bind notify socket");
    let nbd = dir.path().join("s.sock");
    // `exec` keeps the shell's pid, so WATCHDOG_PID=$$ names the daemon itself.
    let script = format!(
        "WATCHDOG_PID=$$ exec '{}' serve --image '{}' --nbd-socket '{}' --frontend nbd \
         --timing off --preset slc-small-004 --capacity 64M",
        env!("CARGO_BIN_EXE_ftld"),
        dir.path().join("x.img").display(),
        nbd.display()
    );
    let child = Command::new("sh")
        .args(["-c", &script])
        .env("NOTIFY_SOCKET", &notify_path)
        .env("WATCHDOG_USEC", "400000")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start ftld");
    let mut guard = Guard(child);
    let mut seen = Vec::new();

    let ready = wait_for(&sock, "READY=1", Duration::from_secs(60), &mut seen);
    nbd_handshake(&nbd);
    let status = ready
        .lines()
        .find_map(|l| l.strip_prefix("STATUS="))
        .unwrap_or_else(|| panic!("READY=1 comes with STATUS=: {ready:?}"));
    assert!(
        status.contains("NBD") && status.contains(&nbd.display().to_string()),
        "status says what is served: {status}"
    );
    assert!(
        seen.iter()
            .take(seen.len() - 1)
            .all(|m| !m.contains("READY=1")),
        "READY=1 is sent once"
    );
    wait_for(&sock, "WATCHDOG=1", Duration::from_secs(10), &mut seen);

    // SAFETY: sends SIGTERM to our own child, which has not been reaped yet (the guard holds it).
    let r = unsafe { libc::kill(guard.0.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(r, 0, "kill: {}", std::io::Error::last_os_error());
    let stopping = wait_for(&sock, "STOPPING=1", Duration::from_secs(30), &mut seen);
    assert!(stopping.contains("SIGTERM"), "{stopping:?}");
    let end = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = guard.0.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < end, "ftld did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "clean exit after SIGTERM: {status}");
}
