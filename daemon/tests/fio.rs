//! fio's NBD engine (libnbd) against the real `ftld serve`, with `verify=crc32c`: 4 KiB random
//! writes at queue depth 32, mixed 4-128 KiB random read/write with `verify_backlog`, four
//! connections at once (fio opens one connection per job), and the first job again with
//! `--timing real` on a small preset.
//!
//! fio's JSON output is parsed: every job must report `error` 0, and the verify phase must have
//! read back at least what was written (so verification really ran). A verify-only pass after a
//! restart proves the data persisted, and the same pass after one block is overwritten behind
//! fio's back must fail, which shows these checks can fail.

use std::process::Output;

use e2e::nbd::Client;
use e2e::{require_tool, run, tool, Daemon, DaemonOpts};
use serde_json::Value;

const FTLD: &str = env!("CARGO_BIN_EXE_ftld");

/// What one fio run produced.
struct FioRun {
    out: Output,
    /// The JSON report (fio prints "connected to NBD server" before it on stdout).
    json: Value,
}

impl FioRun {
    fn text(&self) -> String {
        format!(
            "--- stdout\n{}\n--- stderr\n{}",
            String::from_utf8_lossy(&self.out.stdout),
            String::from_utf8_lossy(&self.out.stderr)
        )
    }

    fn jobs(&self) -> &[Value] {
        self.json["jobs"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Asserts fio succeeded, `jobs` jobs ran without error, and each job's reads (the verify
    /// phase) covered at least its writes.
    fn assert_verified(&self, jobs: usize) {
        assert!(self.out.status.success(), "fio failed:\n{}", self.text());
        assert_eq!(self.jobs().len(), jobs, "{}", self.text());
        for j in self.jobs() {
            assert_eq!(j["error"], 0, "job {}: {}", j["jobname"], self.text());
            let written = j["write"]["io_bytes"].as_u64().unwrap_or(0);
            let read = j["read"]["io_bytes"].as_u64().unwrap_or(0);
            assert!(written > 0, "job wrote nothing:\n{}", self.text());
            assert!(
                read >= written,
                "verify read {read} of {written} written bytes:\n{}",
                self.text()
            );
        }
        let stderr = String::from_utf8_lossy(&self.out.stderr);
        assert!(!stderr.contains("verify:"), "{}", self.text());
    }
}

/// Runs fio with the NBD engine on `uri` and `args`, JSON output.
fn fio(uri: &str, args: &[&str]) -> FioRun {
    let out = run(tool("fio")
        // No verify state files in the working directory.
        .args([
            "--ioengine=nbd",
            "--output-format=json",
            "--verify_state_save=0",
        ])
        .arg(format!("--uri={uri}"))
        .args(args));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = stdout
        .find("\n{")
        .map(|i| i + 1)
        .or_else(|| stdout.starts_with('{').then_some(0))
        .and_then(|i| serde_json::from_str(&stdout[i..]).ok())
        .unwrap_or(Value::Null);
    FioRun { out, json }
}

/// The job of (a): 4 KiB random writes at QD32 over `size`, then verify.
fn random_4k_qd32(size: &str) -> Vec<String> {
    [
        "--name=rand4k",
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=32",
        "--verify=crc32c",
        "--verify_fatal=1",
        "--randseed=4242",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--size={size}")])
    .collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn random_4k_writes_qd32_verify_and_persist() {
    if !require_tool("fio", "fio") {
        return;
    }
    let mut d = Daemon::start(FTLD);
    let job = random_4k_qd32("48M");
    fio(&d.uri(), &strs(&job)).assert_verified(1);

    // The same blocks verify after a clean restart (fio re-derives them: verify_only).
    assert!(d.stop().success(), "{}", d.log());
    d.restart();
    let mut again = strs(&job);
    again.push("--verify_only=1");
    fio(&d.uri(), &again).assert_verified(1);

    // One block overwritten behind fio's back: the same check must now fail.
    let mut c = Client::connect(&d.socket()).expect("connect");
    assert_eq!(c.write(1 << 20, &[0x33; 4096]).expect("write"), 0);
    c.flush().expect("flush");
    c.disconnect();
    let bad = fio(&d.uri(), &again);
    let failed = !bad.out.status.success() || bad.jobs().iter().any(|j| j["error"] != 0);
    assert!(
        failed,
        "fio verify missed a corrupted block:\n{}",
        bad.text()
    );
}

/// fio's random 4 KiB writes with verify on the hybrid schemes (full merges all the way) and
/// on RFTL (folds and shifts, a step per write), GFTL (queued merges, a step per write) and
/// NFTL, and again after a clean restart;
/// BAST also with `same` log placement on a PMCD device.
#[test]
fn random_4k_writes_verify_on_every_block_mapped_scheme() {
    if !require_tool("fio", "fio") {
        return;
    }
    for (scheme, placement, more) in [
        ("bast", "spread", &[][..]),
        ("fast", "spread", &[]),
        ("rftl", "spread", &[]),
        ("nftl", "spread", &[]),
        ("gftl", "spread", &[]),
        (
            "bast",
            "same",
            &["--interconnect", "pmcd", "--controllers", "2"],
        ),
    ] {
        let mut extra = vec!["--ftl", scheme, "--log-placement", placement];
        extra.extend_from_slice(more);
        let mut d = Daemon::start_with(
            FTLD,
            DaemonOpts {
                extra: extra.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            },
        );
        let mut job = random_4k_qd32("48M");
        fio(&d.uri(), &strs(&job)).assert_verified(1);
        if matches!(scheme, "rftl" | "nftl" | "gftl") {
            // The first pass fills each logical block's primary (or replacement); a second in
            // another order rewrites every page, so buffers fold and replacements merge
            // (fio's last option wins).
            job.push("--randseed=77".into());
            fio(&d.uri(), &strs(&job)).assert_verified(1);
        }
        if scheme == "rftl" {
            let rt = &d.stats()["ftl"]["rt"];
            assert!(rt["folds"].as_u64().unwrap_or(0) > 0, "{rt:#}");
            assert!(
                rt["max_job_steps"].as_u64() <= rt["k_fold"].as_u64(),
                "a job longer than a fold's budget: {rt:#}"
            );
            assert_eq!(rt["log_placement"], placement, "{rt:#}");
        } else if scheme == "gftl" {
            let rt = &d.stats()["ftl"]["rt"];
            assert!(rt["merges"].as_u64().unwrap_or(0) > 0, "{rt:#}");
            assert!(
                rt["max_job_steps"].as_u64() <= rt["k_fold"].as_u64(),
                "a merge longer than its budget: {rt:#}"
            );
            assert!(
                rt["buffer_blocks_max"].as_u64() <= rt["buffer_blocks"].as_u64(),
                "the write buffer outgrew its guarantee: {rt:#}"
            );
        } else {
            let merges = &d.stats()["ftl"]["merges"];
            assert!(
                merges["full"]["count"].as_u64().unwrap_or(0) > 0,
                "{scheme}: {merges:#}"
            );
            assert_eq!(merges["log_placement"], placement, "{merges:#}");
        }
        assert!(d.stop().success(), "{}", d.log());
        d.restart();
        let mut again = strs(&job);
        again.push("--verify_only=1");
        fio(&d.uri(), &again).assert_verified(1);
    }
}

#[test]
fn mixed_4k_to_128k_randrw_with_verify_backlog() {
    if !require_tool("fio", "fio") {
        return;
    }
    let d = Daemon::start(FTLD);
    fio(
        &d.uri(),
        &[
            "--name=mixed",
            "--rw=randrw",
            "--rwmixread=30",
            "--bssplit=4k/30:8k/20:16k/15:32k/15:64k/10:128k/10",
            "--iodepth=16",
            "--size=48M",
            "--verify=crc32c",
            "--verify_backlog=32",
            "--verify_fatal=1",
            "--randseed=77",
        ],
    )
    .assert_verified(1);
    let s = d.stats();
    assert_eq!(s["ftl"]["nand_violations"], 0, "{:#}", s["ftl"]);
}

#[test]
fn four_connections_at_once() {
    if !require_tool("fio", "fio") {
        return;
    }
    let d = Daemon::start(FTLD);
    // Each job (= connection) writes and verifies its own 12 MiB of the 64 MiB export.
    fio(
        &d.uri(),
        &[
            "--name=conn",
            "--numjobs=4",
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=16",
            "--size=12M",
            "--offset_increment=16M",
            "--verify=crc32c",
            "--verify_fatal=1",
        ],
    )
    .assert_verified(4);
    let nbd = &d.stats()["nbd"];
    assert!(
        nbd["connections_accepted"].as_u64().unwrap_or(0) >= 4,
        "{nbd:#}"
    );
    assert_eq!(nbd["errors"]["eio"], 0, "{nbd:#}");
}

#[test]
fn random_4k_writes_qd32_verify_with_timing_real() {
    if !require_tool("fio", "fio") {
        return;
    }
    let d = Daemon::start_with(
        FTLD,
        DaemonOpts {
            preset: "k9-003".into(),
            capacity: "16M".into(),
            timing: "real".into(),
            ..Default::default()
        },
    );
    fio(&d.uri(), &strs(&random_4k_qd32("8M"))).assert_verified(1);
    let s = d.stats();
    let busy: u64 = s["nand"]["banks"]
        .as_array()
        .expect("nand.banks")
        .iter()
        .map(|b| b["busy_ns"].as_u64().unwrap_or(0))
        .sum();
    assert!(busy > 0, "timing real models bank time: {:#}", s["nand"]);
}
