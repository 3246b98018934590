//! `systemd-analyze verify` on the unit files in `systemd/` (with `ExecStart=` pointing at the
//! binary under test, since verify checks that it exists). Any diagnostic fails the test,
//! warnings about unknown keys included. Without `systemd-analyze` (Debian package `systemd`)
//! the test prints SKIP, or fails under CI=true.

use std::path::Path;
use std::process::Command;

#[test]
fn units_verify() {
    let tool_ok = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !tool_ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "systemd-analyze is missing (Debian package systemd)"
        );
        eprintln!("SKIP: systemd-analyze is missing (Debian package systemd)");
        return;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd");
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = env!("CARGO_BIN_EXE_ftld");
    let mut units = Vec::new();
    for (from, to) in [
        ("ftld.service", "ftld.service"),
        ("ftld@.service", "ftld@example.service"),
    ] {
        let text = std::fs::read_to_string(src.join(from)).expect("unit file");
        assert!(text.contains("Type=notify"), "{from} is Type=notify");
        assert!(
            text.contains("StateDirectory=ftld"),
            "{from} has StateDirectory"
        );
        assert!(
            text.contains("DeviceAllow=/dev/ublk-control"),
            "{from} allows ublk"
        );
        assert!(
            text.contains("DeviceAllow=/dev/cpu_dma_latency w"),
            "{from} lets timing real keep idle CPUs polling"
        );
        assert!(
            text.contains("TimeoutStopSec="),
            "{from} sets TimeoutStopSec"
        );
        let text = text.replace("/usr/local/bin/ftld", bin);
        let p = dir.path().join(to);
        std::fs::write(&p, text).expect("write unit");
        units.push(p);
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .args(&units)
        .env("SYSTEMD_LOG_LEVEL", "notice")
        .output()
        .expect("systemd-analyze runs");
    let diag = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && diag.trim().is_empty(),
        "systemd-analyze verify: {}\n{diag}",
        out.status
    );
}

#[test]
fn template_names_the_instance_config() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/ftld@.service");
    let text = std::fs::read_to_string(src).expect("unit file");
    assert!(text.contains("--config /etc/ftld/%i.toml"));
}
