//! TLS (`NBD_OPT_STARTTLS`): the spec's rules with a raw client written from the spec plus
//! rustls, and real clients: libnbd's `nbdinfo`/`nbdcopy` with `nbds://` URIs and qemu's
//! `qemu-io`/`qemu-img` with `--object tls-creds-x509`. Certificates are generated per test
//! (rcgen, `common/pki.rs`). A missing tool fails in CI (env `CI`) and is skipped elsewhere.

mod common;

use common::pki::Pki;
use common::*;
use ftl_nbd::protocol::*;
use ftl_nbd::{BlockBackend, MemBackend, TlsMode, TlsPolicy};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

const SIZE: usize = 8 << 20;

fn policy(pki: &Pki, mode: TlsMode, verify_peer: bool) -> TlsPolicy {
    TlsPolicy::new(mode, Some(&pki.server()), verify_peer).expect("TLS policy")
}

/// Fresh certificates and a memory export on a unix socket with TLS `mode`.
fn unix_server(mode: TlsMode, verify_peer: bool) -> (Pki, TestServer<MemBackend>) {
    let pki = Pki::generate();
    let tls = policy(&pki, mode, verify_peer);
    (
        pki,
        TestServer::start_tls(MemBackend::new(SIZE), config(), tls),
    )
}

/// The same on TCP (for real clients, which check the certificate against the host).
async fn tcp_server(mode: TlsMode, verify_peer: bool) -> (Pki, TestServer<MemBackend>) {
    let pki = Pki::generate();
    let tls = policy(&pki, mode, verify_peer);
    (
        pki,
        TestServer::start_tcp(MemBackend::new(SIZE), config(), tls).await,
    )
}

/// Sends `STARTTLS`, expects its acknowledgement and runs the TLS handshake as the client in
/// `certs`.
async fn upgrade(
    mut c: Client<tokio::net::UnixStream>,
    certs: &Path,
) -> std::io::Result<Client<tokio_rustls::client::TlsStream<tokio::net::UnixStream>>> {
    let (ty, data) = c.option(NBD_OPT_STARTTLS, &[]).await;
    assert_eq!((ty, data.len()), (NBD_REP_ACK, 0), "STARTTLS acknowledged");
    let tls = tls_connector(certs).connect(server_name(), c.s).await?;
    Ok(Client::new(tls))
}

/// Waits until the server has counted a failed TLS handshake (it closes asynchronously).
async fn wait_tls_failures<B: BlockBackend>(srv: &TestServer<B>, n: u64) {
    let deadline = tokio::time::Instant::now() + STEP;
    while srv.server.stats().tls_failures < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no TLS failure counted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The lingering close after shutdown over TLS: the server's close_notify ends the client's
/// stream after its reply, the client may still send, and closing with a request unread is no
/// reset (`protocol.rs`, `requests_sent_after_shutdown_do_not_turn_the_close_into_a_reset`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_sent_after_shutdown_do_not_turn_the_tls_close_into_a_reset() {
    let pki = Pki::generate();
    let backend = TestBackend::new(SIZE).fault(0, Fault::Delay(Duration::from_secs(1)));
    let cfg = ftl_nbd::ServerConfig {
        shutdown_grace: Duration::from_secs(5),
        ..config()
    };
    let tls = policy(&pki, TlsMode::Require, false);
    let srv = TestServer::start_tls(backend, cfg, tls);
    let mut c = srv.connect().await;
    c.start().await;
    let mut c = upgrade(c, &pki.anonymous()).await.expect("TLS handshake");
    let go = c.info_or_go(NBD_OPT_GO, EXPORT, &[]).await;
    assert_eq!(go.result, NBD_REP_ACK);
    close_after_shutdown(srv, c, |s| s.get_ref().0.take_error()).await;
}

#[tokio::test]
async fn without_tls_starttls_is_refused_by_policy() {
    let srv = TestServer::start(MemBackend::new(SIZE), config());
    let mut c = srv.connect().await;
    c.start().await;
    let (ty, msg) = c.option(NBD_OPT_STARTTLS, &[]).await;
    assert_eq!(ty, NBD_REP_ERR_POLICY);
    assert!(
        String::from_utf8_lossy(&msg).contains("--tls"),
        "names the setting"
    );
    // Negotiation goes on in the clear.
    assert_eq!(
        c.info_or_go(NBD_OPT_GO, EXPORT, &[]).await.result,
        NBD_REP_ACK
    );
    assert_eq!(c.read(0, 4096).await.error, 0);
}

#[tokio::test]
async fn require_refuses_everything_but_starttls_until_tls() {
    let (pki, srv) = unix_server(TlsMode::Require, false);
    let mut c = srv.connect().await;
    c.start().await;
    for opt in [
        NBD_OPT_LIST,
        NBD_OPT_STRUCTURED_REPLY,
        NBD_OPT_SET_META_CONTEXT,
        0x1234_5678,
    ] {
        let (ty, msg) = c.option(opt, &[]).await;
        assert_eq!(ty, NBD_REP_ERR_TLS_REQD, "option {opt} before TLS");
        assert!(!msg.is_empty());
    }
    for opt in [NBD_OPT_INFO, NBD_OPT_GO] {
        let r = c.info_or_go(opt, EXPORT, &[]).await;
        assert_eq!(r.result, NBD_REP_ERR_TLS_REQD, "option {opt} before TLS");
        assert!(r.export.is_none(), "nothing about the export in the clear");
    }
    // STARTTLS takes no data.
    let (ty, _) = c.option(NBD_OPT_STARTTLS, b"x").await;
    assert_eq!(ty, NBD_REP_ERR_INVALID);

    let mut c = upgrade(c, &pki.anonymous()).await.expect("TLS handshake");
    // Now the same options work, and a second STARTTLS is invalid.
    let (ty, _) = c.option(NBD_OPT_STARTTLS, &[]).await;
    assert_eq!(ty, NBD_REP_ERR_INVALID);
    let info = c.info_or_go(NBD_OPT_INFO, EXPORT, &[]).await;
    assert_eq!(info.result, NBD_REP_ACK);
    assert_eq!(info.export.map(|e| e.0), Some(SIZE as u64));
    let (ty, _) = c.option(NBD_OPT_STRUCTURED_REPLY, &[]).await;
    assert_eq!(ty, NBD_REP_ACK);
    c.structured = true;
    assert_eq!(
        c.info_or_go(NBD_OPT_GO, EXPORT, &[]).await.result,
        NBD_REP_ACK
    );
    // Data goes through the encrypted session and reaches the backend.
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 7 + 3) as u8).collect();
    assert_eq!(c.write(4096, &data, NBD_CMD_FLAG_FUA).await.error, 0);
    let r = c.read(4096, data.len() as u32).await;
    assert_eq!((r.error, &r.data), (0, &data));
    assert_eq!(srv.backend.contents()[4096..4096 + data.len()], data[..]);
    let s = srv.server.stats();
    assert_eq!(
        (s.tls_handshakes, s.tls_failures, s.protocol_errors),
        (1, 0, 0)
    );
}

#[tokio::test]
async fn require_closes_on_export_name_in_the_clear() {
    let (_pki, srv) = unix_server(TlsMode::Require, false);
    let mut c = srv.connect().await;
    c.start().await;
    // NBD_OPT_EXPORT_NAME cannot be answered with an error: the session ends.
    c.send_option(NBD_OPT_EXPORT_NAME, EXPORT.as_bytes()).await;
    c.expect_closed().await;
    srv.wait_idle().await;
    assert_eq!(srv.server.stats().handshakes_completed, 0);
}

#[tokio::test]
async fn on_serves_clear_clients_and_forgets_options_from_before_tls() {
    let (pki, srv) = unix_server(TlsMode::On, false);
    // A client that never upgrades is served in the clear.
    let (mut clear, size, _) = srv.client(true).await;
    assert_eq!(size, SIZE as u64);
    assert_eq!(clear.write(0, &[0xaa; 4096], 0).await.error, 0);

    // Structured replies asked for before STARTTLS do not survive it (the spec): after the
    // upgrade GO without asking again gives simple replies and no SEND_DF.
    let mut c = srv.connect().await;
    c.start().await;
    let (ty, _) = c.option(NBD_OPT_STRUCTURED_REPLY, &[]).await;
    assert_eq!(ty, NBD_REP_ACK);
    let mut c = upgrade(c, &pki.anonymous()).await.expect("TLS handshake");
    let go = c.info_or_go(NBD_OPT_GO, EXPORT, &[]).await;
    assert_eq!(go.result, NBD_REP_ACK);
    let flags = go.export.expect("export info").1;
    assert_eq!(
        flags & NBD_FLAG_SEND_DF,
        0,
        "structured replies were forgotten"
    );
    let r = c.read(0, 4096).await;
    assert!(r.chunks.is_empty(), "a simple reply");
    assert_eq!((r.error, r.data), (0, vec![0xaa; 4096]));
}

#[tokio::test]
async fn bytes_sent_before_the_tls_handshake_close_the_connection() {
    let (_pki, srv) = unix_server(TlsMode::Require, false);
    let mut c = srv.connect().await;
    c.start().await;
    // STARTTLS followed at once by a cleartext option: never a valid TLS handshake.
    let mut b = Vec::new();
    for opt in [NBD_OPT_STARTTLS, NBD_OPT_GO] {
        b.extend_from_slice(&IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&opt.to_be_bytes());
        b.extend_from_slice(&0u32.to_be_bytes());
    }
    c.send(&b).await;
    let (opt, ty, _) = c.option_reply().await;
    assert_eq!((opt, ty), (NBD_OPT_STARTTLS, NBD_REP_ACK));
    c.expect_closed().await;
    srv.wait_idle().await;
    let s = srv.server.stats();
    assert_eq!(s.handshakes_completed, 0);
    assert_eq!(s.tls_failures + s.protocol_errors, 1, "{s:?}");
}

#[tokio::test]
async fn peer_verification_admits_only_certificates_from_the_ca() {
    let (pki, srv) = unix_server(TlsMode::Require, true);
    for (who, certs) in [
        ("no client certificate", pki.anonymous()),
        ("a certificate from another CA", pki.rogue_client()),
    ] {
        let mut c = srv.connect().await;
        c.start().await;
        // TLS 1.3 reports a refused client certificate after the client's side of the
        // handshake: either the handshake or the first read fails, never an option reply.
        if let Ok(mut c) = upgrade(c, &certs).await {
            c.send_option(NBD_OPT_LIST, &[]).await;
            let mut b = [0u8; 1];
            let r = tokio::time::timeout(STEP, tokio::io::AsyncReadExt::read(&mut c.s, &mut b))
                .await
                .expect("server answered in time");
            assert!(
                matches!(r, Err(_) | Ok(0)),
                "{who}: the server refused the session"
            );
        }
    }
    wait_tls_failures(&srv, 2).await;
    // A client whose certificate the CA signed gets in.
    let mut c = srv.connect().await;
    c.start().await;
    let mut c = upgrade(c, &pki.client()).await.expect("TLS handshake");
    assert_eq!(
        c.info_or_go(NBD_OPT_GO, EXPORT, &[]).await.result,
        NBD_REP_ACK
    );
    assert_eq!(c.read(0, 512).await.error, 0);
    let s = srv.server.stats();
    assert_eq!(
        (s.tls_handshakes, s.tls_failures, s.handshakes_completed),
        (1, 2, 1)
    );
}

/// A client that trusts another CA refuses our server (the client's check; the server only
/// sees the handshake fail).
#[tokio::test]
async fn a_client_trusting_another_ca_refuses_the_server() {
    let (pki, srv) = unix_server(TlsMode::On, false);
    let mut c = srv.connect().await;
    c.start().await;
    let e = upgrade(c, &pki.wrong_ca()).await.err().expect("refused");
    assert!(e.to_string().contains("certificate"), "{e}");
    wait_tls_failures(&srv, 1).await;
}

// ---- real clients -------------------------------------------------------------------------

/// Runs a command off the runtime's worker threads (the server runs on them).
async fn run(cmd: &'static str, args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || Command::new(cmd).args(&args).output())
        .await
        .expect("join")
        .unwrap_or_else(|e| panic!("running {cmd}: {e}"))
}

fn ok(cmd: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{cmd} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn failed(cmd: &str, out: &Output) {
    assert!(
        !out.status.success(),
        "{cmd} should have been refused:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libnbd_clients_over_tls() {
    if !require_tool("nbdinfo", "libnbd-bin") || !require_tool("nbdcopy", "libnbd-bin") {
        return;
    }
    let (pki, srv) = tcp_server(TlsMode::Require, true).await;
    let out = run(
        "nbdinfo",
        vec!["--json".into(), srv.nbds_uri(&pki.client())],
    )
    .await;
    ok("nbdinfo", &out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("nbdinfo --json");
    assert_eq!(v["TLS"], true, "{v}");
    assert_eq!(v["exports"][0]["export-size"], SIZE as u64);

    // nbdcopy a file in and back out over TLS; the backend holds the bytes.
    let dir = tempfile::tempdir().expect("tempdir");
    let (src, back) = (dir.path().join("src"), dir.path().join("back"));
    let data = pattern(SIZE, 11);
    std::fs::write(&src, &data).expect("write");
    let uri = srv.nbds_uri(&pki.client());
    let out = run("nbdcopy", vec![src.display().to_string(), uri.clone()]).await;
    ok("nbdcopy in", &out);
    let out = run("nbdcopy", vec![uri, back.display().to_string()]).await;
    ok("nbdcopy out", &out);
    assert!(
        std::fs::read(&back).expect("read") == data,
        "data round trip"
    );
    assert!(srv.backend.contents() == data, "backend holds the data");

    // Refused: no client certificate, a client certificate from another CA, a client that
    // trusts another CA, and a client that does not use TLS.
    for (who, certs) in [
        ("no certificate", pki.anonymous()),
        ("rogue certificate", pki.rogue_client()),
        ("wrong CA", pki.wrong_ca()),
    ] {
        let out = run("nbdinfo", vec![srv.nbds_uri(&certs)]).await;
        failed(who, &out);
    }
    let a = srv.addr.expect("tcp");
    let out = run(
        "nbdinfo",
        vec![format!("nbd://{}:{}/{EXPORT}", a.ip(), a.port())],
    )
    .await;
    failed("cleartext client", &out);
    // Counted when the server's connection task sees the failure: maybe after nbdinfo exited.
    wait_tls_failures(&srv, 2).await;
    let s = srv.server.stats();
    assert!(s.tls_handshakes >= 3 && s.tls_failures >= 2, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_clients_over_tls() {
    if !require_tool("qemu-io", "qemu-utils") || !require_tool("qemu-img", "qemu-utils") {
        return;
    }
    let (pki, srv) = tcp_server(TlsMode::Require, true).await;
    let a = srv.addr.expect("tcp");
    let object = |dir: &Path| {
        format!(
            "tls-creds-x509,id=tls0,endpoint=client,dir={}",
            dir.display()
        )
    };
    let image = format!(
        "driver=nbd,host={},port={},export={EXPORT},tls-creds=tls0",
        a.ip(),
        a.port()
    );
    let qemu_io = |dir: &Path, cmds: &[&str]| {
        let mut v = vec![
            "--object".to_string(),
            object(dir),
            "--image-opts".into(),
            image.clone(),
        ];
        for c in cmds {
            v.push("-c".into());
            v.push(c.to_string());
        }
        v
    };
    let out = run(
        "qemu-io",
        qemu_io(
            &pki.client(),
            &[
                "write -P 0x5a 1M 2M",
                "read -P 0x5a 1M 2M",
                "write -z 2M 64k",
            ],
        ),
    )
    .await;
    ok("qemu-io", &out);
    // qemu-io reports a pattern mismatch on stdout without failing.
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("Pattern verification failed"), "{text}");
    let direct = srv.backend.contents();
    assert!(direct[1 << 20..2 << 20].iter().all(|&b| b == 0x5a));
    assert!(direct[2 << 20..(2 << 20) + (64 << 10)]
        .iter()
        .all(|&b| b == 0));
    assert!(direct[(2 << 20) + (64 << 10)..3 << 20]
        .iter()
        .all(|&b| b == 0x5a));

    // qemu-img convert the whole export to a file over TLS.
    let dir = tempfile::tempdir().expect("tempdir");
    let out_file = dir.path().join("copy.raw");
    let out = run(
        "qemu-img",
        vec![
            "convert".into(),
            "--object".into(),
            object(&pki.client()),
            "--image-opts".into(),
            image.clone(),
            "-O".into(),
            "raw".into(),
            out_file.display().to_string(),
        ],
    )
    .await;
    ok("qemu-img convert", &out);
    let copy = std::fs::read(&out_file).expect("read copy");
    assert!(
        copy == srv.backend.contents(),
        "qemu-img's copy equals the export"
    );

    for (who, certs) in [
        ("no certificate", pki.anonymous()),
        ("rogue certificate", pki.rogue_client()),
        ("wrong CA", pki.wrong_ca()),
    ] {
        let out = run("qemu-io", qemu_io(&certs, &["read 0 4k"])).await;
        // qemu-io may exit 0 after failing to open; it then prints the failure.
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() || err.contains("Could not open") || err.contains("TLS"),
            "{who}: qemu-io was let in:\n{err}"
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text.contains("read 4096/4096"),
            "{who}: qemu-io read data:\n{text}"
        );
    }
    // The server refused the two clients it could judge (the third refused the server). It
    // counts a failed handshake when its connection task sees the failure, which may be after
    // the client got the alert and exited (a race seen once in CI, 2026-11-28).
    wait_tls_failures(&srv, 2).await;
    let s = srv.server.stats();
    assert!(s.tls_handshakes >= 2 && s.tls_failures >= 2, "{s:?}");
}

/// `--tls on` without client certificates, seen through libnbd's own TLS settings: a plain
/// `nbd://` URI (libnbd's default, TLS disabled) is served in the clear, `nbds://` upgrades,
/// and a client that trusts another CA gets in only when it turns its own verification off
/// (`tls-verify-peer=false`) — the check is the client's, as the spec leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libnbd_tls_settings_against_an_optional_tls_server() {
    if !require_tool("nbdinfo", "libnbd-bin") {
        return;
    }
    let (pki, srv) = tcp_server(TlsMode::On, false).await;
    let a = srv.addr.expect("tcp");
    let json = |out: &Output| -> serde_json::Value {
        ok("nbdinfo", out);
        serde_json::from_slice(&out.stdout).expect("nbdinfo --json")
    };
    let clear = format!("nbd://{}:{}/{EXPORT}", a.ip(), a.port());
    let v = json(&run("nbdinfo", vec!["--json".into(), clear]).await);
    assert_eq!(v["TLS"], false, "{v}");
    let v = json(
        &run(
            "nbdinfo",
            vec!["--json".into(), srv.nbds_uri(&pki.anonymous())],
        )
        .await,
    );
    assert_eq!(v["TLS"], true, "{v}");
    let wrong = srv.nbds_uri(&pki.wrong_ca());
    failed("wrong CA", &run("nbdinfo", vec![wrong]).await);
    // libnbd's settings through its Python binding (Debian's python3-libnbd, for Debian's
    // python3): TLS required, the wrong CA, the client's own peer verification off.
    let script = format!(
        "import nbd\n\
         h = nbd.NBD()\n\
         h.set_tls(nbd.TLS_REQUIRE)\n\
         h.set_tls_certificates({:?})\n\
         h.set_tls_verify_peer(False)\n\
         h.set_export_name({EXPORT:?})\n\
         h.connect_tcp('127.0.0.1', '{}')\n\
         assert h.get_tls_negotiated()\n\
         h.pwrite(b'\\x42' * 4096, 8192)\n\
         assert h.pread(4096, 8192) == b'\\x42' * 4096\n\
         h.shutdown()\n",
        pki.wrong_ca().display().to_string(),
        a.port()
    );
    if require_tool("nbdsh", "python3-libnbd") {
        ok(
            "python3 libnbd",
            &run("/usr/bin/python3", vec!["-c".into(), script]).await,
        );
        assert!(srv.backend.contents()[8192..12288]
            .iter()
            .all(|&b| b == 0x42));
    }
    let s = srv.server.stats();
    assert_eq!((s.tls_handshakes, s.handshakes_completed), (2, 3), "{s:?}");
}
