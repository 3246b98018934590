//! The blocking NBD client (`ftl_nbd::client`, used by `ftld replay --target`) against our
//! server and against nbdkit (Debian `nbdkit`): data from many threads pipelined on one
//! connection reads back, server errors are reported per request and leave the connection
//! usable, and a server that goes away fails requests instead of hanging them.

mod common;

use common::*;
use ftl_nbd::client::{Client, ClientError, NbdUri};
use ftl_nbd::MemBackend;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIZE: usize = 16 << 20;

fn block(thread: usize, i: usize) -> Vec<u8> {
    (0..4096).map(|k| (thread * 31 + i * 7 + k) as u8).collect()
}

/// Writes and reads back from 8 threads at once over one connection.
fn exercise(c: Arc<Client>) {
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..64 {
                    let off = ((t * 64 + i) * 4096) as u64;
                    c.write(off, &block(t, i), i % 5 == 0).unwrap();
                }
                let mut b = vec![0; 4096];
                for i in 0..64 {
                    let off = ((t * 64 + i) * 4096) as u64;
                    c.read(off, &mut b).unwrap();
                    assert_eq!(b, block(t, i), "thread {t} block {i}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    c.flush().unwrap();
    c.trim(4096, 8192, false).unwrap();
    let mut b = vec![1; 8192];
    c.read(4096, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 0), "trimmed blocks read zero");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_from_many_threads_read_back() {
    let srv = TestServer::start(MemBackend::new(SIZE), config());
    let uri: NbdUri = srv.uri().parse().unwrap();
    tokio::task::spawn_blocking(move || {
        let c = Client::connect(&uri).unwrap();
        assert_eq!(c.size(), SIZE as u64);
        exercise(Arc::new(c));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_per_request_and_a_lost_server_fails_requests() {
    let srv = TestServer::start(MemBackend::new(SIZE), config());
    let uri = srv.uri();
    let c = tokio::task::spawn_blocking(move || {
        // The export is named "test"; an empty name selects it too, another name is refused.
        let wrong: NbdUri = uri.replace(":///", ":///nope").parse().unwrap();
        match Client::connect(&wrong) {
            Err(ClientError::Refused { export, reply, .. }) => {
                assert_eq!(export, "nope");
                assert!(
                    reply.contains("UNKNOWN") || reply.contains("UNSUP"),
                    "{reply}"
                );
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("connected to a missing export"),
        }
        let c = Client::connect(&uri.parse().unwrap()).unwrap();
        // Unaligned: the server answers EINVAL; the connection goes on.
        match c.write(100, &[1; 512], false) {
            Err(ClientError::Errno {
                errno: 22,
                op: "WRITE",
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        match c.read(SIZE as u64 - 512, &mut [0; 1024]) {
            Err(ClientError::OutOfRange { .. }) => {}
            other => panic!("{other:?}"),
        }
        c.write(0, &[9; 4096], false).unwrap();
        let mut b = [0; 4096];
        c.read(0, &mut b).unwrap();
        assert_eq!(b, [9; 4096]);
        c
    })
    .await
    .unwrap();
    srv.stop().await.unwrap();
    tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        let mut failed = false;
        // The server closes the connection on shutdown; requests fail (not hang) from then on.
        while t.elapsed() < STEP {
            match c.read(0, &mut [0; 512]) {
                Err(ClientError::Disconnected(_)) | Err(ClientError::Io(_)) => {
                    failed = true;
                    break;
                }
                Err(ClientError::Errno { errno: 108, .. }) | Ok(()) => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(failed, "requests still answered after the server stopped");
    })
    .await
    .unwrap();
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn works_against_nbdkit() {
    if !require_tool("nbdkit", "nbdkit") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kit.sock");
    let _kit = Kill(
        Command::new("nbdkit")
            .args(["--foreground", "--exit-with-parent", "-U"])
            .arg(&sock)
            .args(["memory", "16M"])
            .spawn()
            .expect("starting nbdkit"),
    );
    let t = Instant::now();
    while !sock.exists() {
        assert!(t.elapsed() < STEP, "nbdkit did not create its socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let uri: NbdUri = format!("nbd+unix:///?socket={}", sock.display())
        .parse()
        .unwrap();
    let c = Client::connect(&uri).unwrap();
    assert_eq!(c.size(), 16 << 20);
    exercise(Arc::new(c));
}
