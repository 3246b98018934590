//! `ftld replay` as a user runs it: every trace format from the replay crate's fixtures on a
//! scratch image, the outputs (summary.json fields, one requests.csv line per request, the time
//! series, SVG plots), a synthetic workload with a precondition, and the errors a user meets.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const FTLD: &str = env!("CARGO_BIN_EXE_ftld");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/replay/tests/fixtures")
        .join(name)
}

fn ftld(args: &[&str]) -> Output {
    Command::new(FTLD)
        .arg("replay")
        .args(args)
        .output()
        .expect("run ftld")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn every_trace_format_replays_with_all_outputs() {
    let dir = tempfile::tempdir().unwrap();
    for (name, format, requests) in [
        ("msr.csv", "msr", 4),
        ("umass.spc", "umass", 4),
        ("blkparse.txt", "blkparse", 5),
        ("fio_v2.log", "fio", 4),
        ("fio_v3.log", "fio", 3),
        ("disksim.trace", "disksim", 3),
    ] {
        let out = dir.path().join(name);
        let o = ftld(&[
            fixture(name).to_str().unwrap(),
            "--capacity",
            "64M",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{name}: {}", text(&o));
        let s: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
        assert_eq!(s["requests"], requests, "{name}: {s}");
        assert_eq!(s["config"]["format"], format);
        for op in ["read", "write", "flush"] {
            for k in ["count", "mean_us", "p50_us", "p99_us", "p999_us", "max_us"] {
                assert!(s[op][k].is_number(), "{name}: {op}.{k} missing");
            }
        }
        assert!(s["waf"].is_number() && s["simulated_seconds"].is_number());
        assert!(s["gc"]["erases"].is_number());
        let csv = std::fs::read_to_string(out.join("requests.csv")).unwrap();
        let mut lines = csv.lines();
        assert_eq!(lines.next(), Some("arrival_us,op,offset,length,latency_us"));
        assert_eq!(lines.count(), requests, "{name}: {csv}");
        assert!(std::fs::read_to_string(out.join("timeseries.csv"))
            .unwrap()
            .starts_with("start_s,"));
        for svg in ["latency_cdf.svg", "latency_time.svg", "waf_time.svg"] {
            let body = std::fs::read_to_string(out.join(svg)).unwrap();
            assert!(body.contains("<svg"), "{name}: {svg}");
        }
    }
    // MSR's first request is 3.3 GB into a 64 MiB device: wrapped by default, counted...
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("msr.csv/summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["adjusted"]["wrapped"], 1);
    assert_eq!(s["adjusted"]["unaligned"], 0);
    // ... or refused.
    let o = ftld(&[
        fixture("msr.csv").to_str().unwrap(),
        "--capacity",
        "64M",
        "--out-of-range",
        "refuse",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (s["requests"].as_u64(), s["adjusted"]["refused"].as_u64()),
        (Some(3), Some(1))
    );
}

#[test]
fn a_workload_on_a_preconditioned_device() {
    let o = ftld(&[
        "--workload",
        "hotcold,hot=80/20,requests=20000,read=20",
        "--capacity",
        "32M",
        "--precondition",
        "80",
        "--queue-depth",
        "8",
        "--ftl",
        "fast",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["requests"], 20000);
    assert_eq!(s["config"]["ftl"], "fast");
    assert!(s["config"]["precondition"]["fill_bytes"].as_u64().unwrap() > 20 << 20);
    assert!(s["gc"]["merges"]["full"].is_number(), "{s}");
    assert!(
        s["waf"].as_f64().unwrap() > 1.0,
        "an aged device amplifies writes: {s}"
    );
}

#[test]
fn bad_input_gets_a_clear_error() {
    // A malformed line: the file and line number.
    let o = ftld(&[
        fixture("bad_line.spc").to_str().unwrap(),
        "--capacity",
        "64M",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("bad_line.spc:3:") && e.contains("opcode"), "{e}");
    // Content that fits no format.
    let o = ftld(&[
        fixture("unknown.txt").to_str().unwrap(),
        "--capacity",
        "64M",
    ]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("unknown.txt:2:") && e.contains("fits no trace format"),
        "{e}"
    );
    // A bad workload spec and a missing source are usage errors.
    let o = ftld(&["--workload", "zipf,requests=10"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("workload kind"));
    let o = ftld(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = ftld(&["/nonexistent/trace.csv"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/trace.csv"));
}
