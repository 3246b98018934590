//! End-to-end test harness for ftld: start the real daemon, check for the client tools, and
//! set up (and always tear down) FUSE files, loop devices and mounts.
//!
//! The tests themselves live in `daemon/tests/*.rs`, because only a package's own integration
//! tests get `env!("CARGO_BIN_EXE_ftld")` (a path cargo guarantees is built and fresh); they
//! pass that path to [`Daemon::start`]. Other test suites (fio, fsx, crash loops, raw-socket
//! fuzzing, benchmarks) use the same pieces:
//!
//! | item | what it does |
//! |---|---|
//! | [`Daemon`] | `ftld serve --timing off` on a temp image; waits until the socket accepts; stops it in `Drop` |
//! | [`require_tool`], [`require_root`] | missing tool: panic naming the Debian package under `CI=true`, else a loud SKIP |
//! | [`mounts`] | [`mounts::Nbdfuse`], [`mounts::LoopDev`], [`mounts::Mount`] guards and the cross-process [`mounts::serial`] lock |
//! | [`files`] | a deterministic tree of files and its `sha256sum` manifest |
//! | [`nbd::Client`] | a blocking raw NBD client written from the spec (bad input, pipelined crash writers) |
//! | [`run`], [`run_ok`] | run a command, capture its output, fail with the whole output |
//!
//! # Cleanup contract
//! Every guard undoes its step in `Drop`, also when the test panics, in reverse order of
//! creation (declare them in the order you create them). The machine has 8 loop devices and one
//! FUSE device, so tests that use them hold [`mounts::serial`] for their whole run.

pub mod daemon;
pub mod files;
pub mod mounts;
pub mod nbd;

pub use daemon::{Daemon, DaemonOpts};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Whether we run under CI (`CI=true`), where a missing tool fails instead of skipping.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Where `name` is installed: `PATH`, then `/usr/sbin` and `/sbin` (often not on a user's PATH).
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Checks that tool `name` (from Debian package `debian_pkg`) is installed. Missing: under CI
/// this panics naming the package; elsewhere it prints a SKIP line and returns `false`, and the
/// test should return.
pub fn require_tool(name: &str, debian_pkg: &str) -> bool {
    if find_tool(name).is_some() {
        return true;
    }
    missing(&format!(
        "{name} not found (install the Debian package {debian_pkg}; ./scripts/test does when run as root)"
    ))
}

/// Checks that we are root (for losetup and mount). Same policy as [`require_tool`].
pub fn require_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    missing("this test needs root (losetup, mount)")
}

/// Checks that a path (a device node such as /dev/fuse) exists. Same policy as
/// [`require_tool`].
pub fn require_path(path: &str, why: &str) -> bool {
    if Path::new(path).exists() {
        return true;
    }
    missing(&format!("{path} does not exist ({why})"))
}

fn missing(what: &str) -> bool {
    if in_ci() {
        panic!("{what}; CI must not skip this test");
    }
    eprintln!("\n*** SKIP: {what} ***\n");
    false
}

/// Runs `cmd` to completion and returns its output (panics only if it cannot start).
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Runs `cmd`, panics with its whole output unless it exits 0, and returns its stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    if !out.status.success() {
        panic!(
            "{cmd:?} failed with {}\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A command for tool `name`, found via [`find_tool`] (so `/usr/sbin` tools work off PATH).
pub fn tool(name: &str) -> Command {
    Command::new(find_tool(name).unwrap_or_else(|| PathBuf::from(name)))
}
