//! Real NBD clients against the server: `nbdinfo` and `nbdcopy` (Debian `libnbd-bin`) and
//! `qemu-io` (Debian `qemu-utils`). A missing tool fails the test in CI (env `CI` set) and is
//! skipped with a loud message elsewhere.

mod common;

use common::*;
use ftl_nbd::MemBackend;
use std::process::{Command, Output};

const SIZE: usize = 16 << 20;

/// Runs a command off the runtime's worker threads (the server runs on them).
async fn run(cmd: &'static str, args: Vec<String>) -> Output {
    let out = tokio::task::spawn_blocking(move || Command::new(cmd).args(&args).output())
        .await
        .expect("join")
        .unwrap_or_else(|e| panic!("running {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

async fn nbdinfo_json(uri: String) -> serde_json::Value {
    let out = run("nbdinfo", vec!["--json".into(), uri]).await;
    serde_json::from_slice(&out.stdout).expect("nbdinfo --json output")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbdinfo_sees_size_block_sizes_and_flags() {
    if !require_tool("nbdinfo", "libnbd-bin") {
        return;
    }
    let srv = TestServer::start(MemBackend::new(SIZE), config());
    let v = nbdinfo_json(srv.uri()).await;
    assert_eq!(v["protocol"], "newstyle-fixed");
    assert_eq!(v["structured"], true);
    let e = &v["exports"][0];
    assert_eq!(e["export-name"], EXPORT);
    assert_eq!(e["description"], DESCRIPTION);
    assert_eq!(e["export-size"], SIZE as u64);
    assert_eq!(e["block_size_minimum"], 512);
    assert_eq!(e["block_size_preferred"], 4096);
    assert_eq!(e["block_size_maximum"], 32 << 20);
    for flag in [
        "can_cache",
        "can_df",
        "can_fast_zero",
        "can_flush",
        "can_fua",
        "can_multi_conn",
        "can_trim",
        "can_zero",
    ] {
        assert_eq!(e[flag], true, "{flag} in {e}");
    }
    assert_eq!(e["is_read_only"], false);
    assert_eq!(e["is_rotational"], false);

    // Read-only export.
    let ro = TestServer::start(MemBackend::new(SIZE).with_read_only(true), config());
    let v = nbdinfo_json(ro.uri()).await;
    let e = &v["exports"][0];
    assert_eq!(e["is_read_only"], true);
    assert_eq!(e["can_trim"], false);
    assert_eq!(e["can_zero"], false);
    assert_eq!(e["can_flush"], true);

    // --list goes through NBD_OPT_LIST.
    let out = run("nbdinfo", vec!["--list".into(), "--json".into(), srv.uri()]).await;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["exports"][0]["export-name"], EXPORT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_io_patterns_roundtrip() {
    if !require_tool("qemu-io", "qemu-utils") {
        return;
    }
    let srv = TestServer::start(MemBackend::new(SIZE), config());
    let image = srv.uri();
    let cmds = [
        "write -P 0xab 0 1M",
        "write -f -P 0xcd 1M 1M",
        "aio_write -P 0x11 4M 64k",
        "aio_write -P 0x22 5M 64k",
        "aio_flush",
        "write -z 2M 1M",
        "discard 3M 512k",
        "flush",
        "read -P 0xab 0 1M",
        "read -P 0xcd 1M 1M",
        "read -P 0 2M 1M",
        "read -P 0 3M 512k",
        "read -P 0x11 4M 64k",
        "read -P 0x22 5M 64k",
        "read -P 0 15M 1M",
    ];
    let mut args = vec!["-f".into(), "raw".into(), image];
    for c in cmds {
        args.push("-c".into());
        args.push(c.into());
    }
    let out = run("qemu-io", args).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stdout.contains("Pattern verification failed") && !stderr.contains("failed"),
        "qemu-io reported a failure:\n{stdout}\n{stderr}"
    );
    assert_eq!(stdout.matches("read ").count(), 7, "{stdout}");
    // The server's own view agrees.
    let data = srv.backend.contents();
    assert!(data[..1 << 20].iter().all(|&b| b == 0xab));
    assert!(data[4 << 20..(4 << 20) + (64 << 10)]
        .iter()
        .all(|&b| b == 0x11));
    srv.wait_idle().await;
    assert_eq!(srv.server.stats().protocol_errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbdcopy_roundtrips_an_image_over_several_connections() {
    if !require_tool("nbdcopy", "libnbd-bin") {
        return;
    }
    let srv = TestServer::start(MemBackend::new(SIZE), config());
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src.img");
    let dst = dir.path().join("dst.img");
    let data: Vec<u8> = (0..SIZE).map(|i| (i / 4096 * 7 + i % 251) as u8).collect();
    std::fs::write(&src, &data).expect("write image");
    let to_str = |p: &std::path::Path| p.to_str().expect("utf-8 path").to_string();
    run(
        "nbdcopy",
        vec!["--connections=4".into(), to_str(&src), srv.uri()],
    )
    .await;
    assert!(srv.backend.contents() == data, "export differs from source");
    run(
        "nbdcopy",
        vec!["--connections=4".into(), srv.uri(), to_str(&dst)],
    )
    .await;
    assert!(
        std::fs::read(&dst).expect("read copy") == data,
        "copy differs"
    );
    srv.wait_idle().await;
    let st = srv.server.stats();
    assert!(st.connections_accepted >= 2, "{st:?}");
    assert_eq!(st.protocol_errors, 0);
}
