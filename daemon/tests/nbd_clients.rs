//! The real `ftld serve` seen by real NBD clients: nbdinfo (handshake, size, block sizes,
//! flags), qemu-io (data patterns, FUA, zeroes, discard, persistence across a restart) and
//! `ftld stats` after I/O.
//!
//! Harness: the `e2e` crate (`tests/src/`); see its docs for the guards used here.

use e2e::{require_tool, run, run_ok, tool, Daemon, DaemonOpts};
use serde_json::Value;

// The certificate generator shared with crates/nbd's TLS tests.
#[path = "../../crates/nbd/tests/common/pki.rs"]
mod pki;

const FTLD: &str = env!("CARGO_BIN_EXE_ftld");

/// Runs qemu-io commands against `uri` and fails on any pattern mismatch or error (qemu-io may
/// exit 0 when a pattern check fails, so its output is read).
fn qemu_io(uri: &str, cmds: &[&str]) -> String {
    qemu_io_opts(&[], uri, cmds)
}

/// [`qemu_io`] with more qemu-io options (e.g. `-r` for read-only).
fn qemu_io_opts(opts: &[&str], uri: &str, cmds: &[&str]) -> String {
    let mut c = tool("qemu-io");
    c.args(opts).args(["-f", "raw", uri]);
    for cmd in cmds {
        c.args(["-c", cmd]);
    }
    let out = run(&mut c);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success()
            && !text.contains("Pattern verification failed")
            && !text.to_lowercase().contains("error")
            && !text.contains("failed"),
        "qemu-io {cmds:?} failed ({}):\n{text}",
        out.status
    );
    text
}

fn nbdinfo_json(uri: &str) -> Value {
    let out = run_ok(tool("nbdinfo").arg("--json").arg(uri));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("nbdinfo printed bad JSON: {e}\n{out}"))
}

#[test]
fn nbdinfo_reports_size_block_sizes_and_every_flag() {
    if !require_tool("nbdinfo", "libnbd-bin") {
        return;
    }
    let d = Daemon::start(FTLD);
    let v = nbdinfo_json(&d.uri());
    assert_eq!(v["protocol"], "newstyle-fixed", "{v:#}");
    assert_eq!(v["structured"], true, "{v:#}");
    let e = &v["exports"][0];
    assert_eq!(e["export-name"], "ftld", "{e:#}");
    assert_eq!(e["export-size"], 64u64 << 20, "{e:#}");
    assert_eq!(e["block_size_minimum"], 512, "{e:#}");
    assert_eq!(e["block_size_preferred"], 4096, "{e:#}");
    assert_eq!(e["block_size_maximum"], 32u64 << 20, "{e:#}");
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
        assert_eq!(e[flag], true, "{flag} in {e:#}");
    }
    assert_eq!(e["is_read_only"], false, "{e:#}");
    assert_eq!(e["is_rotational"], false, "{e:#}");
}

#[test]
fn read_only_export_refuses_writes() {
    if !require_tool("nbdinfo", "libnbd-bin") || !require_tool("qemu-io", "qemu-utils") {
        return;
    }
    let d = Daemon::start_with(
        FTLD,
        DaemonOpts {
            extra: vec!["--read-only".into()],
            ..Default::default()
        },
    );
    let e = nbdinfo_json(&d.uri())["exports"][0].clone();
    assert_eq!(e["is_read_only"], true, "{e:#}");
    assert_eq!(e["can_trim"], false, "{e:#}");
    assert_eq!(e["can_zero"], false, "{e:#}");
    qemu_io_opts(&["-r"], &d.uri(), &["read -P 0 0 1M"]);
    let out = run(tool("qemu-io").args(["-f", "raw", &d.uri(), "-c", "write -P 1 0 4k"]));
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() || text.contains("failed") || text.contains("ermission"),
        "write to a read-only export succeeded:\n{text}"
    );
}

/// Writes that cover whole pages, 512-byte pieces of pages, FUA, zeroes and discard.
const WRITES: &[&str] = &[
    "write -P 0x11 0 1M",
    "write -P 0x22 1M 64k",
    "write -P 0x33 4608 1536",
    "write -f -P 0x44 2M 256k",
    "write -P 0x55 3M 1M",
    "write -z 3M 128k",
    "discard 3584k 256k",
    "write -P 0x66 63M 1M",
    "flush",
];

/// What [`WRITES`] leave behind.
const READS: &[&str] = &[
    "read -P 0x11 0 4608",
    "read -P 0x33 4608 1536",
    "read -P 0x11 6144 1042432",
    "read -P 0x22 1M 64k",
    "read -P 0 1088k 960k",
    "read -P 0x44 2M 256k",
    "read -P 0 3M 128k",
    "read -P 0x55 3200k 384k",
    "read -P 0 3584k 256k",
    "read -P 0x55 3840k 256k",
    "read -P 0x66 63M 1M",
];

#[test]
fn qemu_io_patterns_survive_a_restart() {
    if !require_tool("qemu-io", "qemu-utils") {
        return;
    }
    let mut d = Daemon::start(FTLD);
    qemu_io(&d.uri(), WRITES);
    qemu_io(&d.uri(), READS);
    assert!(d.stop().success(), "ftld exited badly:\n{}", d.log());
    d.restart();
    qemu_io(&d.uri(), READS);
}

/// A bit flipped in the image under one 4 KiB page is an I/O error for the client that reads
/// it (qemu-io sees EIO), not wrong data; its neighbours read fine, and `ftld stats` counts it.
#[test]
fn corrupt_data_on_the_medium_is_an_io_error() {
    use std::io::{Read, Seek, SeekFrom, Write};
    if !require_tool("qemu-io", "qemu-utils") {
        return;
    }
    let mut d = Daemon::start(FTLD);
    qemu_io(&d.uri(), &["write -P 0x5c 0 64k"]);
    assert!(d.stop().success(), "ftld exited badly:\n{}", d.log());
    // Find page 3 (bytes 12k..16k) on flash, offline, then flip one bit of its data.
    let ftl = ftl::Ftl::open(
        &d.image(),
        nand_model::TimingMode::Off,
        ftl::FtlConfig::default(),
    )
    .expect("open the image");
    let (page, slot) = ftl.physical_slot(3).expect("page 3 is on flash");
    ftl.close().expect("close");
    drop(ftl);
    let at = nand_model::page_data_offset(&d.image(), page).expect("offset")
        + u64::from(slot) * 4096
        + 777;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(d.image())
        .expect("image");
    let mut b = [0u8];
    f.seek(SeekFrom::Start(at)).expect("seek");
    f.read_exact(&mut b).expect("read");
    f.seek(SeekFrom::Start(at)).expect("seek");
    f.write_all(&[b[0] ^ 1]).expect("write");
    drop(f);
    d.restart();
    for (cmd, bad) in [
        ("read -P 0x5c 12k 4k", true),
        ("read -P 0x5c 13k 512", true),
        ("read -P 0x5c 0 64k", true),
        ("read -P 0x5c 0 12k", false),
        ("read -P 0x5c 16k 48k", false),
    ] {
        let out = run(tool("qemu-io").args(["-f", "raw", &d.uri(), "-c", cmd]));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !text.contains("Pattern verification failed"),
            "{cmd}: {text}"
        );
        assert_eq!(
            text.contains("Input/output error"),
            bad,
            "{cmd}: expected {}:\n{text}",
            if bad { "EIO" } else { "success" }
        );
    }
    let stats = d.stats();
    assert_eq!(stats["ftl"]["uncorrectable_reads"], 3, "{stats:#}");
}

#[test]
fn stats_report_host_writes_and_every_layer() {
    if !require_tool("qemu-io", "qemu-utils") {
        return;
    }
    let d = Daemon::start(FTLD);
    qemu_io(&d.uri(), &["write -P 7 0 2M", "flush", "read -P 7 0 2M"]);
    let s = d.stats();
    let ftl = &s["ftl"];
    assert!(ftl["host_writes"].as_u64().unwrap_or(0) > 0, "{ftl:#}");
    assert!(
        ftl["host_write_bytes"].as_u64().unwrap_or(0) >= 2 << 20,
        "{ftl:#}"
    );
    assert!(ftl["host_flushes"].as_u64().unwrap_or(0) > 0, "{ftl:#}");
    assert_eq!(ftl["capacity_bytes"], 64u64 << 20);
    let banks = s["nand"]["banks"].as_array().expect("nand.banks");
    assert_eq!(banks.len(), 16, "slc-small-004 has 4 x 4 banks");
    assert!(
        s["nand"]["totals"]["programs"].as_u64().unwrap_or(0) > 0,
        "{:#}",
        s["nand"]
    );
    let nbd = &s["nbd"];
    assert!(
        nbd["requests"]["write"].as_u64().unwrap_or(0) > 0,
        "{nbd:#}"
    );
    assert!(
        nbd["bytes_written"].as_u64().unwrap_or(0) >= 2 << 20,
        "{nbd:#}"
    );
    assert_eq!(s["pid"], d.pid());
    // The device's physical spare and the greedy WAF limit it implies (above 1, finite).
    let (spare, limit) = (&s["ftl"]["spare_factor"], &s["ftl"]["waf_limit_greedy"]);
    assert!(
        spare.as_f64().is_some_and(|x| x > 0.0 && x < 1.0),
        "{spare}"
    );
    assert!(
        limit.as_f64().is_some_and(|x| x > 1.0 && x < 20.0),
        "{limit}"
    );
    assert!(s.get("ok").is_none(), "ftld stats strips the envelope");
}

#[test]
fn tcp_listener_serves_the_same_export() {
    if !require_tool("nbdinfo", "libnbd-bin") || !require_tool("qemu-io", "qemu-utils") {
        return;
    }
    let d = Daemon::start_with(
        FTLD,
        DaemonOpts {
            extra: vec!["--nbd-listen".into(), "127.0.0.1:0".into()],
            ..Default::default()
        },
    );
    // The daemon prints the bound address (port 0 picks a free one).
    let log = d.log();
    let uri = log
        .split_whitespace()
        .map(|w| w.trim_matches('\''))
        .find(|w| w.starts_with("nbd://127.0.0.1:"))
        .unwrap_or_else(|| panic!("no TCP URI printed:\n{log}"))
        .to_string();
    assert_eq!(nbdinfo_json(&uri)["exports"][0]["export-size"], 64u64 << 20);
    // Both listeners serve one device: what TCP writes, the unix socket reads.
    qemu_io(&uri, &["write -P 0x5a 8M 1M", "flush"]);
    qemu_io(&d.uri(), &["read -P 0x5a 8M 1M"]);
}

#[test]
fn timing_real_serves_correct_data() {
    if !require_tool("qemu-io", "qemu-utils") {
        return;
    }
    let mut d = Daemon::start_with(
        FTLD,
        DaemonOpts {
            preset: "k9-003".into(),
            capacity: "16M".into(),
            timing: "real".into(),
            ..Default::default()
        },
    );
    qemu_io(
        &d.uri(),
        &["write -P 0x77 0 2M", "write -f -P 0x78 4M 64k", "flush"],
    );
    qemu_io(
        &d.uri(),
        &[
            "read -P 0x77 0 2M",
            "read -P 0x78 4M 64k",
            "read -P 0 5M 1M",
        ],
    );
    let s = d.stats();
    let busy: u64 = s["nand"]["banks"]
        .as_array()
        .expect("banks")
        .iter()
        .map(|b| b["busy_ns"].as_u64().unwrap_or(0))
        .sum();
    assert!(
        busy > 0,
        "timing real must model bank time: {:#}",
        s["nand"]
    );
    assert!(d.stop().success(), "{}", d.log());
}

/// `ftld serve --tls require --tls-verify-peer` on TCP and the unix socket: libnbd and qemu with
/// a client certificate get in, over both sockets; a client without a certificate, one that
/// trusts another CA, and any cleartext client do not.
#[test]
fn tls_required_with_client_certificates() {
    if !require_tool("nbdinfo", "libnbd-bin") || !require_tool("qemu-io", "qemu-utils") {
        return;
    }
    let pki = pki::Pki::generate();
    let server_dir = pki.server().display().to_string();
    let d = Daemon::start_with(
        FTLD,
        DaemonOpts {
            extra: vec![
                "--nbd-listen".into(),
                "127.0.0.1:0".into(),
                "--tls".into(),
                "require".into(),
                "--tls-certificates".into(),
                server_dir,
                "--tls-verify-peer".into(),
            ],
            ..Default::default()
        },
    );
    // The daemon prints nbds:// URIs with a placeholder for the client's directory.
    let log = d.log();
    let uri_for = |scheme: &str, certs: &std::path::Path| {
        log.split_whitespace()
            .map(|w| w.trim_matches('\''))
            .find(|w| w.starts_with(scheme))
            .unwrap_or_else(|| panic!("no {scheme} URI printed:\n{log}"))
            .replace("CLIENT-PKI-DIR", &certs.display().to_string())
    };
    let tcp = uri_for("nbds://127.0.0.1:", &pki.client());
    let v = nbdinfo_json(&tcp);
    assert_eq!(v["TLS"], true, "{v:#}");
    assert_eq!(v["exports"][0]["export-size"], 64u64 << 20, "{v:#}");

    // qemu over TLS writes; libnbd over TLS on the unix socket reads it back.
    let port = tcp
        .trim_start_matches("nbds://127.0.0.1:")
        .split('/')
        .next()
        .expect("port")
        .to_string();
    let qemu = |certs: &std::path::Path, cmds: &[&str]| {
        let mut c = tool("qemu-io");
        c.args([
            "--object",
            &format!(
                "tls-creds-x509,id=tls0,endpoint=client,dir={}",
                certs.display()
            ),
            "--image-opts",
            &format!("driver=nbd,host=127.0.0.1,port={port},tls-creds=tls0"),
        ]);
        for cmd in cmds {
            c.args(["-c", cmd]);
        }
        run(&mut c)
    };
    let out = qemu(&pki.client(), &["write -P 0x3c 4M 1M", "flush"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("wrote 1048576/1048576"),
        "qemu-io over TLS:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("copy");
    let unix = uri_for("nbds+unix://", &pki.client());
    run_ok(tool("nbdcopy").arg(&unix).arg(&copy).args(["--no-extents"]));
    let data = std::fs::read(&copy).expect("copy");
    assert!(data[4 << 20..5 << 20].iter().all(|&b| b == 0x3c));
    assert!(data[..4 << 20].iter().all(|&b| b == 0));

    // Refused: no client certificate, another CA, cleartext on either socket.
    for certs in [pki.anonymous(), pki.wrong_ca()] {
        let out = run(tool("nbdinfo").arg(uri_for("nbds://127.0.0.1:", &certs)));
        assert!(
            !out.status.success(),
            "nbdinfo with {} got in",
            certs.display()
        );
        let out = qemu(&certs, &["read 0 4k"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text.contains("read 4096/4096"),
            "qemu-io with {} read:\n{text}",
            certs.display()
        );
    }
    for clear in [format!("nbd://127.0.0.1:{port}"), d.uri()] {
        let out = run(tool("nbdinfo").arg(&clear));
        assert!(!out.status.success(), "cleartext {clear} got in");
    }
    let nbd = &d.stats()["nbd"];
    assert!(nbd["tls_handshakes"].as_u64() >= Some(3), "{nbd:#}");
    assert!(nbd["tls_failures"].as_u64() >= Some(2), "{nbd:#}");
}

/// TLS settings that cannot work are usage errors (exit 2) naming what is wrong, before the
/// image is created.
#[test]
fn tls_settings_are_checked_before_serving() {
    let pki = pki::Pki::generate();
    let dir = tempfile::tempdir().expect("tempdir");
    let image = dir.path().join("x.img");
    let serve = |args: &[&str]| {
        let out = std::process::Command::new(FTLD)
            .args([
                "serve",
                "--frontend",
                "nbd",
                "--timing",
                "off",
                "--capacity",
                "16M",
            ])
            .arg("--image")
            .arg(&image)
            .args(args)
            .output()
            .expect("ftld");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let missing = dir.path().join("no-such-dir");
    let missing = missing.display().to_string();
    let anonymous = pki.anonymous().display().to_string();
    let server = pki.server().display().to_string();
    for (args, says) in [
        (vec!["--tls", "require"], "--tls-certificates"),
        (vec!["--tls", "maybe"], "off, on or require"),
        (vec!["--tls-certificates", &server], "--tls on"),
        (
            vec!["--tls", "on", "--tls-certificates", &missing],
            "no-such-dir/server-cert.pem",
        ),
        // A client's directory has no server certificate.
        (
            vec!["--tls", "on", "--tls-certificates", &anonymous],
            "server-cert.pem",
        ),
    ] {
        let (code, err) = serve(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?} should say {says:?}: {err}");
    }
    assert!(!image.exists(), "no image created for a bad TLS setting");
    // The config file's [nbd] table: a relative directory is taken from the file's directory.
    let cfg = dir.path().join("disk.toml");
    std::fs::write(
        &cfg,
        "[nbd]\ntls = \"require\"\ntls_certificates = \"pki\"\n",
    )
    .expect("write");
    let (code, err) = serve(&["--config", &cfg.display().to_string()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(
            &dir.path()
                .join("pki")
                .join("server-cert.pem")
                .display()
                .to_string()
        ),
        "{err}"
    );
}

/// `nbdinfo --map --json`: the export's extents as (offset, length, type); type 3 is
/// hole + zero, 0 data.
fn nbdinfo_map(uri: &str) -> Vec<(u64, u64, u64)> {
    let out = run_ok(tool("nbdinfo").args(["--map", "--json", uri]));
    let v: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("nbdinfo printed bad JSON: {e}\n{out}"));
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {out}"))
        .iter()
        .map(|e| {
            let n = |k: &str| e[k].as_u64().unwrap_or_else(|| panic!("{k} in {e}"));
            (n("offset"), n("length"), n("type"))
        })
        .collect()
}

/// `base:allocation` through real clients: what the host wrote is data, what it never wrote
/// or discarded (or zeroed) is a hole that reads as zeroes, on every scheme, and the same after
/// a power cut. `nbdinfo --map` and `qemu-img map` both read it (`qemu-img convert` and
/// `nbdcopy` skip the holes).
#[test]
fn block_status_maps_written_and_discarded_ranges() {
    if !require_tool("nbdinfo", "libnbd-bin") || !require_tool("qemu-io", "qemu-utils") {
        return;
    }
    const M: u64 = 1 << 20;
    const H: u64 = 3;
    let want = vec![
        (0, 256 << 10, 0),
        (256 << 10, 512 << 10, H),
        (768 << 10, 256 << 10, 0),
        (M, 7 * M, H),
        (8 * M, 4096, 0),
        (8 * M + 4096, 4096, H),
        (8 * M + 8192, 4096, 0),
        (8 * M + 12288, 56 * M - 12288, H),
    ];
    for scheme in ["page", "fast", "gftl", "nftl"] {
        let mut d = Daemon::start_with(
            FTLD,
            DaemonOpts {
                extra: vec!["--ftl".into(), scheme.into()],
                ..Default::default()
            },
        );
        let uri = d.uri();
        let v = nbdinfo_json(&uri);
        assert_eq!(v["exports"][0]["contexts"][0], "base:allocation", "{v:#}");
        qemu_io(
            &uri,
            &[
                "write -P 1 0 1M",
                "write -P 2 8M 12k",
                "discard 256k 512k",
                "write -z 8196k 4k",
            ],
        );
        assert_eq!(nbdinfo_map(&uri), want, "{scheme}");
        let qmap = run_ok(tool("qemu-img").args(["map", "--output=json", "-f", "raw", &uri]));
        let q: Value = serde_json::from_str(&qmap).unwrap();
        let data: Vec<(u64, u64)> = q
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["data"] == true)
            .map(|e| (e["start"].as_u64().unwrap(), e["length"].as_u64().unwrap()))
            .collect();
        assert_eq!(
            data,
            vec![
                (0, 256 << 10),
                (768 << 10, 256 << 10),
                (8 * M, 4096),
                (8 * M + 8192, 4096)
            ],
            "{scheme}: {qmap}"
        );
        d.kill9();
        d.restart();
        assert_eq!(nbdinfo_map(&d.uri()), want, "{scheme} after a power cut");
        qemu_io(
            &d.uri(),
            &["read -P 1 0 256k", "read -P 0 256k 512k", "read -P 2 8M 4k"],
        );
    }
}
