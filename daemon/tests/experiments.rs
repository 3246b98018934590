//! The experiment scripts (`experiments/*.py`) in their reduced size (`--quick`), as
//! `./scripts/test` promises: each runs `ftld replay` end to end and writes a result table
//! whose every ftld figure is a positive number; a few shapes the model must show are checked.

use std::path::Path;
use std::process::Command;

const FTLD: &str = env!("CARGO_BIN_EXE_ftld");

/// Runs one script; its `results.json` tables.
fn run(script: &str) -> serde_json::Map<String, serde_json::Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = tempfile::tempdir().unwrap();
    let o = Command::new("python3")
        .arg(root.join("experiments").join(script))
        .args(["--quick", "--ftld", FTLD, "--out"])
        .arg(out.path())
        .output()
        .expect("running python3");
    assert!(
        o.status.success(),
        "{script}: {:?}\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let md = std::fs::read_to_string(out.path().join("results.md")).unwrap();
    assert!(md.contains("| ---") || md.contains("|---"), "{md}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("results.json")).unwrap()).unwrap();
    let tables = v.as_object().unwrap().clone();
    for (title, t) in &tables {
        let cols = t["columns"].as_array().unwrap();
        let rows = t["rows"].as_array().unwrap();
        assert!(!rows.is_empty(), "{title}: no rows");
        for r in rows {
            for c in cols {
                let c = c.as_str().unwrap();
                if c.starts_with("paper") {
                    continue;
                }
                let v = &r[c];
                assert!(
                    v.as_f64().is_some_and(|x| x >= 0.0) || v.is_string(),
                    "{title}: {c} = {v} in {r}"
                );
            }
        }
    }
    tables
}

fn column(t: &serde_json::Value, c: &str) -> Vec<f64> {
    t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[c].as_f64().unwrap_or_else(|| panic!("{c} in {r}")))
        .collect()
}

fn python() -> bool {
    e2e::require_tool("python3", "python3")
}

#[test]
fn lftl_table2() {
    if !python() {
        return;
    }
    let t = run("lftl_table2.py");
    let t = t.values().next().unwrap();
    // Synchronous (FUA) writers, one per queue: more queues keep more banks busy.
    let w = column(t, "ftld write MB/s (FUA)");
    assert_eq!(w.len(), 5);
    assert!(w[4] > 2.0 * w[0], "16 queues vs 1: {w:?}");
    assert!(column(t, "ftld read MB/s").iter().all(|&x| x > 0.0));
}

#[test]
fn lftl_table3() {
    // XFS on the served device through nbdfuse and a loop device, as a user mounts it.
    if !python()
        || !e2e::require_root()
        || !e2e::require_path("/dev/fuse", "nbdfuse needs FUSE")
        || !e2e::require_tool("nbdfuse", "libnbd-bin")
        || !e2e::require_tool("fusermount3", "fuse3")
        || !e2e::require_tool("losetup", "mount")
        || !e2e::require_tool("mkfs.xfs", "xfsprogs")
        || !e2e::require_tool("fio", "fio")
        || !e2e::require_tool("nbdkit", "nbdkit")
    {
        return;
    }
    let t = run("lftl_table3.py");
    let t = t.values().next().unwrap();
    let rows = t["rows"].as_array().unwrap();
    assert_eq!(
        rows.len(),
        4,
        "1 queue, 1 queue synchronous, 16 queues, nbdkit memory"
    );
    for r in [&rows[0], &rows[2]] {
        // The recording holds everything fio wrote (16 threads x 4 MiB) and read back (the
        // read phase after a remount and dropped caches reaches the device), and its replay
        // moves data in virtual time.
        assert!(r["recorded MiB written"].as_f64().unwrap() >= 64.0, "{r}");
        assert!(r["recorded MiB read"].as_f64().unwrap() >= 64.0, "{r}");
        for c in [
            "ftld write MB/s (real)",
            "ftld read MB/s (real)",
            "replay write MB/s (virtual)",
            "replay read MB/s (virtual)",
        ] {
            assert!(r[c].as_f64().unwrap() > 0.0, "{c} in {r}");
        }
    }
    // mtd_blkdevs' way, one request at a time each on flash before the next: the same
    // recorded writes, slower than when the write buffer acknowledges them.
    let sync = &rows[1];
    assert!(
        sync["recorded MiB written"].as_f64().unwrap() >= 64.0,
        "{sync}"
    );
    let w = |r: &serde_json::Value| r["replay write MB/s (virtual)"].as_f64().unwrap();
    assert!(
        w(sync) > 0.0 && w(sync) < w(&rows[0]),
        "{sync} / {}",
        rows[0]
    );
}

#[test]
fn lftl_gc() {
    if !python() {
        return;
    }
    let t = run("lftl_gc.py");
    let t5 = t.values().next().unwrap();
    let elapsed = column(t5, "ftld elapsed s");
    assert!(elapsed.iter().all(|&x| x > 0.0), "{elapsed:?}");
    assert_eq!(t.len(), 2, "Table 5 and Fig. 6");
    // Fig. 6: FUA writes wait for GC on their banks; in-path GC makes them wait longest.
    let f6 = t
        .iter()
        .find(|(title, _)| title.starts_with("LFTL Fig. 6"))
        .map(|(_, v)| v)
        .expect("the Fig. 6 table");
    let mean = column(f6, "ftld mean write us");
    assert_eq!(mean.len(), 7, "{f6}");
    assert!(
        mean[6] > mean[4] && mean[6] > mean[5],
        "in-path vs the others: {mean:?}"
    );
}

#[test]
fn lftl_table4() {
    if !python() {
        return;
    }
    let t = run("lftl_table4.py");
    let t = t.values().next().unwrap();
    // A scan of every page, a roll-forward, a clean open: only the last reads no page, and it
    // is the fastest.
    assert_eq!(column(t, "ftld pages scanned")[2], 0.0, "{t}");
    assert!(
        column(t, "ftld pages scanned")[..2]
            .iter()
            .all(|&p| p > 0.0),
        "{t}"
    );
    let open = column(t, "ftld open s");
    assert!(open[2] > 0.0 && open[0] > 10.0 * open[2], "{open:?}");
    let scan = column(t, "ftld scan s");
    assert!(
        scan[0] > 0.0 && scan[0] <= open[0] && scan[2] == 0.0,
        "{scan:?}"
    );
}

#[test]
fn mtftl_fig6() {
    if !python() {
        return;
    }
    let t = run("mtftl_fig6.py");
    let t = t.values().next().unwrap();
    assert_eq!(column(t, "user threads"), [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]);
    assert!(column(t, "shared buffer MB/s (queues 1)")
        .iter()
        .all(|&x| x > 0.0));
}

#[test]
fn kim000_fig34() {
    if !python() {
        return;
    }
    let t = run("kim000_fig34.py");
    let t = t.values().next().unwrap();
    // Closed loop: a deeper queue waits longer on average.
    let avg = column(t, "avg ms (1 worker)");
    assert_eq!(avg.len(), 9);
    assert!(avg[8] > avg[0], "{avg:?}");
}

#[test]
fn thesis_table3() {
    if !python() {
        return;
    }
    let t = run("thesis_table3.py");
    assert_eq!(t.len(), 2, "Table 3 and Fig. 16");
    let merges = t.values().next().unwrap();
    // Every stand-in trace overwrites a FAST device that is 80 % full: merges happen.
    assert!(column(merges, "tmcd spread merges")
        .iter()
        .all(|&x| x > 0.0));
}

#[test]
fn waf_limit() {
    if !python() {
        return;
    }
    let t = run("waf_limit.py");
    let t = t.values().next().unwrap();
    let rows = t["rows"].as_array().unwrap();
    let pick = |workload: &str, victims: &str, separation: &str| -> Vec<f64> {
        rows.iter()
            .filter(|r| {
                r["workload"].as_str() == Some(workload)
                    && r["victims"].as_str() == Some(victims)
                    && r["separation"].as_str() == Some(separation)
            })
            .map(|r| r["WAF"].as_f64().unwrap())
            .collect()
    };
    // Greedy GC cannot beat the Lambert-W limit by much (finite blocks help a little).
    for r in rows
        .iter()
        .filter(|r| r["workload"].as_str() == Some("uniform"))
    {
        let ratio = r["WAF / limit"].as_f64().unwrap();
        assert!(ratio > 0.9, "{r}");
    }
    // With frontiers shared per bank the format sets the same room aside whatever the queue
    // count: one physical spare, and the WAF barely moves with the queues. With frontiers per
    // queue the format sets a block per queue and bank aside, so the spare grows with them.
    // (That per-bank frontiers leave less of the spare idle shows at full size only, 1.09x
    // against 1.18x the limit at 8 queues: `experiments/README.md`; the open blocks per bank
    // are counted in `crates/ftl/tests/gc.rs`.)
    let uniform_7 = |queues: f64, frontiers: &str| {
        rows.iter()
            .find(|r| {
                r["workload"].as_str() == Some("uniform")
                    && r["OP"].as_f64() == Some(0.07)
                    && r["victims"].as_str() == Some("greedy")
                    && r["separation"].as_str() == Some("none")
                    && r["queues"].as_f64() == Some(queues)
                    && r["frontiers"].as_str() == Some(frontiers)
            })
            .unwrap_or_else(|| panic!("no uniform 7 % row for {queues} queues, {frontiers}"))
    };
    let per_bank: Vec<_> = [1.0, 2.0, 4.0, 8.0]
        .iter()
        .map(|&q| uniform_7(q, "per-bank"))
        .collect();
    for r in &per_bank {
        assert_eq!(r["spare factor"], per_bank[0]["spare factor"], "{r}");
        let (waf, first) = (
            r["WAF"].as_f64().unwrap(),
            per_bank[0]["WAF"].as_f64().unwrap(),
        );
        assert!((waf / first - 1.0).abs() < 0.03, "{r} vs {}", per_bank[0]);
    }
    let spare = |r: &serde_json::Value| r["spare factor"].as_f64().unwrap();
    assert!(
        spare(uniform_7(8.0, "per-queue")) > spare(uniform_7(2.0, "per-queue")),
        "per-queue frontiers: more queues, more blocks set aside"
    );
    // Cost-benefit keeps cold data out of the way of hot data: less WAF than greedy.
    let (greedy, cb) = (
        pick("hot/cold 80/20", "greedy", "none"),
        pick("hot/cold 80/20", "cost-benefit", "none"),
    );
    assert!(
        cb[0] < greedy[0],
        "cost-benefit {cb:?} vs greedy {greedy:?}"
    );
    // Separation judges most host pages of the 80/20 workload hot, none of a run without it.
    for r in rows
        .iter()
        .filter(|r| r["workload"].as_str() == Some("hot/cold 80/20"))
    {
        let hot = r["hot pages"].as_f64().unwrap();
        match r["separation"].as_str() {
            Some("hot-cold") => assert!((0.6..0.95).contains(&hot), "{r}"),
            _ => assert_eq!(hot, 0.0, "{r}"),
        }
    }
}

#[test]
fn gc_bound() {
    // The NBD rows send their FUA writes with libnbd's shell.
    if !python() || !e2e::require_tool("nbdsh", "python3-libnbd") {
        return;
    }
    let t = run("gc_bound.py");
    let t = t.values().next().unwrap();
    let rows = t["rows"].as_array().unwrap();
    // Two presets x two policies, and RFTL, x virtual, real and NBD.
    assert_eq!(rows.len(), 15);
    let nbd: Vec<_> = rows
        .iter()
        .filter(|r| r["timing"].as_str() == Some("nbd"))
        .collect();
    assert_eq!(nbd.len(), 5);
    assert_eq!(
        rows.iter()
            .filter(|r| r["policy"].as_str() == Some("rftl"))
            .count(),
        3
    );
    for r in nbd {
        // Every write of the served run reached the daemon and was counted there.
        assert!(r["server max us"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["IOPS"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(column(t, "bound us").iter().all(|&x| x > 0.0));
    // Real-time rows ran the stall probe: its columns are there (how many writes a stall
    // touched depends on the machine), and a write left out as stalled was never the only one.
    for r in rows
        .iter()
        .filter(|r| r["timing"].as_str() != Some("virtual"))
    {
        assert!(r["host stall us"].as_f64().unwrap() >= 0.0, "{r}");
        let max = r["max us"].as_f64().unwrap();
        let calm = r["max calm us"].as_f64().unwrap();
        assert!(calm > 0.0 && calm <= max, "{r}");
        if r["stalled writes"].as_u64().unwrap() == 0 {
            assert_eq!(calm, max, "{r}");
        }
    }
    // Virtual time is deterministic and free of this machine's noise: there every write after
    // the warm-up is within the bound (real-time rows also carry scheduling delays).
    for r in rows
        .iter()
        .filter(|r| r["timing"].as_str() == Some("virtual"))
    {
        let m = r["max / bound"].as_f64().unwrap_or(f64::INFINITY);
        assert!(m <= 1.0, "{r}");
    }
}

#[test]
fn rftl_table5() {
    if !python() {
        return;
    }
    let t = run("rftl_table5.py");
    let mut tables = t.values();
    // Table 4: RFTL alone. Virtual time is exact: no write exceeds one step and its own
    // program, at any utilisation and block size, and no job exceeds a fold's steps.
    let t4 = tables.next().unwrap();
    assert_eq!(t4["rows"].as_array().unwrap().len(), 4);
    for r in t4["rows"].as_array().unwrap() {
        let worst = r["W worst us"].as_f64().unwrap();
        let bound = r["bound us"].as_f64().unwrap();
        assert!(worst <= bound + 0.01, "{r}");
        assert!(r["folds"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["max job steps"].as_f64() <= r["k_fold"].as_f64(), "{r}");
        // A read never waits for GC: one array read and its transfer, every time.
        assert_eq!(r["R best us"], r["R worst us"], "{r}");
    }
    // Table 5: RFTL's worst write is the lowest of every scheme on the same requests.
    let t5 = tables.next().unwrap();
    let rows = t5["rows"].as_array().unwrap();
    let worst = |s: &str| {
        rows.iter()
            .find(|r| r["scheme"].as_str() == Some(s))
            .and_then(|r| r["W worst us"].as_f64())
            .unwrap_or_else(|| panic!("{s} in {rows:?}"))
    };
    for other in ["nftl", "page (in-path)", "page (adaptive)", "bast", "fast"] {
        assert!(
            worst("rftl") < worst(other),
            "rftl against {other}: {rows:?}"
        );
    }
    // GFTL gives the same write bound, its reads search a data block's OOB area after a
    // step, so its worst request is a read, above RFTL's worst and within its own bound
    // (paper 004 Table 5: 3650 against 2325 us), and its eager, centralised GC copies more
    // than RFTL's on-demand one (§5.2).
    assert!(worst("gftl") <= 2321.12 + 0.01, "{rows:?}");
    let field = |s: &str, f: &str| {
        rows.iter()
            .find(|r| r["scheme"].as_str() == Some(s))
            .and_then(|r| r[f].as_f64())
            .unwrap_or_else(|| panic!("{s} {f} in {rows:?}"))
    };
    assert!(
        field("gftl", "T worst us") > field("rftl", "T worst us"),
        "{rows:?}"
    );
    assert!(
        field("gftl", "R worst us") <= field("gftl", "bound us") + 0.01,
        "{rows:?}"
    );
    assert!(field("gftl", "OOB reads") > 0.0, "{rows:?}");
    assert!(field("gftl", "merges") > 0.0, "{rows:?}");
    assert!(
        field("gftl", "copies") > field("rftl", "copies"),
        "{rows:?}"
    );
}

/// `--out` names a directory a rerun replaces: one holding anything an experiment did not
/// write (a user's notes, `--out .`) is refused before any run, and nothing in it is deleted;
/// an experiment's own earlier output (it has the marker) is replaced.
#[test]
fn an_out_directory_with_other_files_is_refused_and_kept() {
    if !python() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "mine").unwrap();
    let script = root.join("experiments").join("waf_limit.py");
    // The script's quick run with `--out out`.
    let run_into = |out: &Path| {
        Command::new("python3")
            .arg(&script)
            .args(["--quick", "--ftld", FTLD, "--out"])
            .arg(out)
            .output()
            .expect("running python3")
    };
    let o = run_into(dir.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "ran into a user's directory: {err}");
    assert!(
        err.contains("holds files no experiment wrote (notes.txt)"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "mine");
    // A file is not a directory to write into.
    let o = run_into(&notes);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a directory"));
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "mine");
    // Another experiment's output is not this one's to replace.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join(".ftld-experiment"), "lftl_gc\n").unwrap();
    std::fs::write(other.join("results.json"), "{}").unwrap();
    let o = run_into(&other);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("it holds the results of lftl_gc"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(other.join("results.json").exists());
    // This experiment's own output directory (marked) is replaced by a rerun.
    let out = dir.path().join("results");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join(".ftld-experiment"), "waf_limit\n").unwrap();
    std::fs::write(out.join("stale.json"), "").unwrap();
    let o = run_into(&out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!out.join("stale.json").exists());
    assert!(out.join("results.json").exists() && out.join(".ftld-experiment").exists());
}
