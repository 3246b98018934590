//! `benches/fio/run.sh --smoke`: the end-to-end benchmark script runs every job against every
//! server for a second each and prints a complete table, so the script cannot rot unnoticed.
//! With a list of schemes it runs one ftld per scheme (`ftld-page`, `ftld-bast`).
//! (The real benchmark is run by hand; see benches/README.md. No timing is judged here.)

use std::path::Path;

use e2e::{require_tool, run};

const FTLD: &str = env!("CARGO_BIN_EXE_ftld");

const JOBS: [&str; 8] = [
    "randread-4k-qd1",
    "randwrite-4k-qd1",
    "randread-4k-qd32x4",
    "randwrite-4k-qd32x4",
    "seqwrite-128k-qd8",
    // Server and fio pinned to one CPU.
    "randread-4k-qd1-pin",
    "randwrite-4k-qd1-pin",
    "seqwrite-128k-qd8-pin",
];

#[test]
fn fio_benchmark_script_smoke() {
    if !(require_tool("fio", "fio")
        && require_tool("nbdkit", "nbdkit")
        && require_tool("qemu-nbd", "qemu-utils")
        && require_tool("qemu-img", "qemu-utils")
        && require_tool("jq", "jq")
        && require_tool("taskset", "util-linux"))
    {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/fio/run.sh");
    let out = run(std::process::Command::new("bash").arg(&script).args([
        "--smoke",
        "--ftld",
        FTLD,
        "--ftl",
        "page,bast",
    ]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let text = format!(
        "{stdout}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "run.sh --smoke failed:\n{text}");
    assert!(stdout.contains("FTL scheme page"), "{text}");
    assert!(
        stdout.contains("jobs ending in -pin: the server (every thread) and fio on CPU"),
        "{text}"
    );
    for job in JOBS {
        for server in ["ftld-page", "ftld-bast", "nbdkit", "qemu-nbd"] {
            let row = stdout
                .lines()
                .find(|l| {
                    let mut w = l.split_whitespace();
                    w.next() == Some(job) && w.next() == Some(server)
                })
                .unwrap_or_else(|| panic!("no row for {job} on {server}:\n{text}"));
            let cols: Vec<&str> = row.split_whitespace().collect();
            let iops: f64 = cols[2].parse().unwrap_or(0.0);
            assert!(iops > 0.0, "no IOPS in {row:?}:\n{text}");
            if server.starts_with("ftld") {
                // "IOPS ratio": against nbdkit, then qemu-nbd.
                assert!(
                    cols.get(5).is_some_and(|r| r.ends_with('x')) && cols[6] == "nbdkit,",
                    "no ratio in {row:?}"
                );
            }
            if server == "ftld-bast" && job == "randwrite-4k-qd32x4" {
                let merges = cols.last().copied().unwrap_or("");
                assert!(
                    merges.split('/').count() == 3 && merges != "0/0/0",
                    "no merges in {row:?}:\n{text}"
                );
            }
        }
    }
}

/// `benches/timing/run.py --smoke`: the timing-fidelity benchmark runs its jobs (sequential
/// writes and reads with timing real and off, QD1 and QD128 random reads with timing off, real/hybrid
/// and real/sleep, the virtual-time replay of the QD128 loop) on one preset and prints every
/// table with numbers in it.
#[test]
fn timing_benchmark_script_smoke() {
    if !(require_tool("fio", "fio") && require_tool("python3", "python3")) {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/timing/run.py");
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("timing.json");
    let out = run(std::process::Command::new("python3").arg(&script).args([
        "--smoke".as_ref(),
        "--ftld".as_ref(),
        FTLD.as_ref(),
        "--json".as_ref(),
        json.as_os_str(),
    ]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let text = format!(
        "{stdout}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "run.py --smoke failed:\n{text}");
    let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with("k9-003")).collect();
    assert_eq!(rows.len(), 5, "a row per table:\n{text}");
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("json");
    let r = &results[0];
    // The model's figures follow from the preset (k9-003: 25 us read + 50 us for 4 KiB and its
    // OOB entry over an 81.92 MB/s channel); the measured ones must be there and positive.
    let model = r["qd1_model_us"].as_f64().expect("model");
    assert!((75.0..76.0).contains(&model), "{model}: {text}");
    for key in [
        "seq_write_mb_s",
        "qd128_iops_real",
        "qd128_iops_off",
        "server_mean_hybrid_us",
        "server_mean_sleep_us",
        "qd128_model_iops",
        "seq_write_off_mb_s",
        "seq_read_mb_s",
        "seq_read_off_mb_s",
        "seq_read_limit_mb_s",
        "seq_read_model_mb_s",
    ] {
        assert!(r[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {text}");
    }
    // k9-003 has 4 KiB pages: each read is one slot and its OOB entry.
    let per_read = r["seq_read_bytes_per_read"]
        .as_f64()
        .expect("bytes per read");
    assert!(
        (4096.0..4096.0 + 128.0).contains(&per_read),
        "{per_read}: {text}"
    );
}
