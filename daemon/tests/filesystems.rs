//! Real filesystems on the export: nbdfuse turns it into a file, losetup into a block device,
//! mkfs.ext4 / mkfs.xfs and mount into a filesystem. A tree of files with known checksums is
//! written, everything is unmounted, the daemon is stopped (SIGTERM, exit 0) and started
//! again, the filesystem is checked (fsck) and mounted, and every checksum is verified.
//!
//! Needs root, /dev/fuse, fuse3, libnbd-bin, e2fsprogs, xfsprogs. These tests hold the
//! machine-wide device lock (`e2e::mounts::serial`) because loop devices and FUSE are shared,
//! and every mount, loop device and FUSE mount is undone by a guard, also on failure.

use std::path::Path;

use e2e::mounts::{serial, LoopDev, Mount, Nbdfuse};
use e2e::{files, require_path, require_root, require_tool, run_ok, tool, Daemon, DaemonOpts};

const FTLD: &str = env!("CARGO_BIN_EXE_ftld");

/// Tools every filesystem test needs, with their Debian packages.
fn have_tools(mkfs: &str, fsck: &str, pkg: &str) -> bool {
    require_root()
        && require_path("/dev/fuse", "FUSE; the fuse kernel module")
        && require_tool("nbdfuse", "libnbd-bin")
        && require_tool("fusermount3", "fuse3")
        && require_tool("losetup", "mount")
        && require_tool("sha256sum", "coreutils")
        && require_tool(mkfs, pkg)
        && require_tool(fsck, pkg)
}

/// Runs one session: nbdfuse + loop device (+ mount of `work/mnt`), then `f`, then undoes it all.
fn with_device(d: &Daemon, work: &Path, f: impl FnOnce(&LoopDev)) {
    let fuse = Nbdfuse::start(&work.join("fuse"), &d.uri());
    let lo = LoopDev::attach(&fuse.file());
    f(&lo);
    drop(lo);
    drop(fuse);
}

fn roundtrip(mkfs: &[&str], fsck: &[&str], pkg: &str) {
    roundtrip_on("page", mkfs, fsck, pkg);
}

fn roundtrip_on(scheme: &str, mkfs: &[&str], fsck: &[&str], pkg: &str) {
    if !have_tools(mkfs[0], fsck[0], pkg) {
        return;
    }
    let _devices = serial();
    // mkfs.xfs needs at least 300 MB.
    let mut d = Daemon::start_with(
        FTLD,
        DaemonOpts {
            capacity: "512M".into(),
            extra: vec!["--ftl".into(), scheme.into()],
            ..Default::default()
        },
    );
    let work = tempfile::Builder::new()
        .prefix("ftld-fs-")
        .tempdir()
        .expect("tempdir");
    let mnt = work.path().join("mnt");
    let mut manifest = String::new();
    with_device(&d, work.path(), |lo| {
        run_ok(tool(mkfs[0]).args(&mkfs[1..]).arg(lo.dev()));
        let m = Mount::new(lo.dev(), &mnt);
        let written = files::write_tree(m.path(), 0x5eed);
        manifest = files::manifest(m.path(), &written);
        files::verify(m.path(), &manifest);
    });
    if scheme == "rftl" {
        // mkfs and one file tree write most logical blocks about once (folds need rewrites:
        // fio.rs and crash.rs make them); what is checked here is the data through a real
        // filesystem, its fsck, and the restart.
        let rt = &d.stats()["ftl"]["rt"];
        eprintln!("{scheme}: partial GC {rt}");
        assert!(rt["k_fold"].as_u64().unwrap_or(0) > 0, "{scheme}: {rt:#}");
    } else if scheme == "gftl" {
        // The journal's small writes go to the write buffer and queue merges.
        let rt = &d.stats()["ftl"]["rt"];
        eprintln!("{scheme}: partial GC {rt}");
        assert!(rt["merges"].as_u64().unwrap_or(0) > 0, "{scheme}: {rt:#}");
    } else if scheme != "page" {
        let m = &d.stats()["ftl"]["merges"];
        let total: u64 = ["switch", "partial", "full"]
            .iter()
            .map(|k| m[k]["count"].as_u64().unwrap_or(0))
            .sum();
        eprintln!("{scheme}: merges {m}");
        assert!(total > 0, "{scheme}: no merge: {m:#}");
    }
    let status = d.stop();
    assert!(status.success(), "ftld exited with {status}:\n{}", d.log());
    d.restart();
    with_device(&d, work.path(), |lo| {
        run_ok(tool(fsck[0]).args(&fsck[1..]).arg(lo.dev()));
        let m = Mount::new(lo.dev(), &mnt);
        files::verify(m.path(), &manifest);
    });
    let status = d.stop();
    assert!(status.success(), "ftld exited with {status}:\n{}", d.log());
}

#[test]
fn ext4_files_survive_a_daemon_restart() {
    roundtrip(
        &["mkfs.ext4", "-q", "-F"],
        &["fsck.ext4", "-n", "-f"],
        "e2fsprogs",
    );
}

#[test]
fn xfs_files_survive_a_daemon_restart() {
    roundtrip(&["mkfs.xfs", "-q", "-f"], &["xfs_repair", "-n"], "xfsprogs");
}

/// ext4 on the hybrid schemes: mkfs's discards, the journal's small synchronous writes and
/// the file tree's sequential ones make every merge kind; and on RFTL and GFTL.
#[test]
fn ext4_files_survive_a_daemon_restart_bast_fast_rftl_and_gftl() {
    for scheme in ["bast", "fast", "rftl", "gftl"] {
        roundtrip_on(
            scheme,
            &["mkfs.ext4", "-q", "-F"],
            &["fsck.ext4", "-n", "-f"],
            "e2fsprogs",
        );
    }
}
