//! `scripts/lib.sh`'s package planning, run against the package state of a fresh machine of
//! this project's kind (`tests/fixtures/fresh-rust-machine.dpkg-status.xz`: its
//! `/var/lib/dpkg/status`, taken before anything was installed). That machine ships qemu-utils
//! from bookworm-backports; installing qemu-system-x86 from bookworm beside it makes apt remove
//! qemu-utils, which broke `./scripts/test` on a fresh machine while a hand-set-up one passed.
//!
//! apt only simulates here (`apt-get -s` against the fixture's database), so the test needs no
//! root and changes nothing; it needs apt's package lists (`apt-get update`), and without them
//! (or without apt) it prints SKIP, or fails under CI=true.

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Runs bash with `scripts/lib.sh` sourced and `FTLD_DPKG_ADMINDIR` set.
fn lib_sh(admindir: &Path, script: &str) -> std::process::Output {
    Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -euo pipefail; source scripts/lib.sh; {script}"
        ))
        .current_dir(root())
        .env("FTLD_DPKG_ADMINDIR", admindir)
        .output()
        .expect("run bash")
}

fn skip_or_fail(why: &str) {
    assert!(!e2e::in_ci(), "{why}");
    eprintln!("SKIP: {why}");
}

#[test]
fn fresh_machine_plan_installs_everything_and_removes_nothing() {
    if !e2e::require_tool("apt-get", "apt") || !e2e::require_tool("xz", "xz-utils") {
        return;
    }
    let lists_ok = Path::new("/var/lib/apt/lists").read_dir().is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().contains("_Packages"))
    });
    if !lists_ok {
        skip_or_fail("apt has no package lists (run apt-get update)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = root().join("tests/fixtures/fresh-rust-machine.dpkg-status.xz");
    let status = Command::new("xz")
        .arg("-dc")
        .arg(&fixture)
        .output()
        .expect("xz");
    assert!(status.status.success(), "xz -dc {}", fixture.display());
    std::fs::write(dir.path().join("status"), &status.stdout).expect("write status");

    // The fixture's machine lacks some of what scripts/test needs, qemu-system-x86 among them.
    let out = lib_sh(dir.path(), "packages_missing \"${TEST_PACKAGES[@]}\"");
    assert!(out.status.success());
    let missing = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(missing.lines().any(|l| l == "qemu-system-x86"), "{missing}");
    assert!(
        !missing.lines().any(|l| l == "qemu-utils"),
        "the fixture has qemu-utils installed: {missing}"
    );

    // A plain install of what is missing would remove qemu-utils: the bug this guards. If a
    // later Debian point release stops doing that, the plan below must still hold.
    let plain = lib_sh(
        dir.path(),
        "_apt_get -s -q install --no-install-recommends $(packages_missing \"${TEST_PACKAGES[@]}\")",
    );
    let plain_removes_qemu_utils = String::from_utf8_lossy(&plain.stdout)
        .lines()
        .any(|l| l.starts_with("Remv qemu-utils "));
    eprintln!("a plain install removes qemu-utils: {plain_removes_qemu_utils}");

    // The plan, then the simulated install of the plan: nothing removed, everything installed.
    let out = lib_sh(
        dir.path(),
        "plan=$(plan_install $(packages_missing \"${TEST_PACKAGES[@]}\")); echo \"$plan\"; \
         echo ---; _apt_get -s -q install --no-install-recommends --allow-downgrades $plan",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "plan failed:\n{stdout}\n{stderr}");
    let (plan, sim) = stdout.split_once("---\n").expect("plan and simulation");
    if plain_removes_qemu_utils {
        assert!(
            plan.lines().any(|l| l.starts_with("qemu-utils/")),
            "the plan re-installs qemu-utils from qemu-system-x86's suite:\n{plan}\n{stderr}"
        );
    }
    let removed: Vec<&str> = sim.lines().filter(|l| l.starts_with("Remv ")).collect();
    assert!(removed.is_empty(), "the plan removes packages: {removed:?}");
    for pkg in missing.lines() {
        let installed = sim.lines().any(|l| l.starts_with(&format!("Inst {pkg} ")));
        assert!(installed, "the plan does not install {pkg}:\n{sim}");
    }
    // Every qemu package the plan installs comes from one version.
    let qemu_versions: std::collections::BTreeSet<&str> = sim
        .lines()
        .filter(|l| {
            l.starts_with("Inst qemu-utils ")
                || l.starts_with("Inst qemu-system-x86 ")
                || l.starts_with("Inst qemu-system-common ")
        })
        .filter_map(|l| l.split('(').nth(1)?.split(' ').next())
        .collect();
    assert!(
        qemu_versions.len() <= 1,
        "qemu packages from two versions: {qemu_versions:?}"
    );
}

/// A package that exists nowhere is a clear failure naming it, not an empty plan taken as
/// success.
#[test]
fn unknown_package_is_a_clear_failure() {
    if !e2e::require_tool("apt-get", "apt") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("status"), "").expect("write status");
    let out = lib_sh(dir.path(), "plan_install ftld-no-such-package-xyz");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ftld-no-such-package-xyz"), "{stderr}");
}
