//! fsx (the `fsx` crate from crates.io, a Rust port of the File System eXerciser) in block mode
//! against the export for 50 000 operations: pread/pwrite, mmap reads and writes, msync
//! invalidation, sendfile, fsync, fdatasync, posix_fadvise and hole punching, every read checked
//! against fsx's own model of the device.
//!
//! The export reaches fsx as a block device: nbdfuse makes it a file and `losetup
//! --direct-io=on` a loop device. (fsx cannot use the nbdfuse file itself: FUSE hands nbdfuse
//! the pieces of unaligned user buffers, and libnbd refuses requests that are not multiples of
//! the 512-byte minimum block size the export advertises.) Punching a hole in the block device
//! becomes a write-zeroes with unmap on the loop device, a hole punched in the FUSE file, and an
//! NBD TRIM; the FTL reads trimmed ranges back as zeroes, which is what fsx expects of a punched
//! hole, so hole punching is on (the test checks that TRIMs reached the daemon).
//!
//! fsx is installed by `scripts/test` (`cargo install fsx --locked` into `<target>/tools`);
//! this test also finds it on `PATH` or through `FTLD_FSX`. The seed is random and printed;
//! `FTLD_FSX_SEED` repeats a run. Needs root, /dev/fuse, fuse3, libnbd-bin.

use std::path::PathBuf;

use e2e::mounts::{serial, LoopDev, Nbdfuse};
use e2e::{find_tool, in_ci, require_path, require_root, require_tool, run, Daemon};

const FTLD: &str = env!("CARGO_BIN_EXE_ftld");
const OPS: u32 = 50_000;

/// fsx's configuration for a block device with 512-byte sectors.
const FSX_TOML: &str = r#"
blockmode = true
nosizechecks = true
flen = 33554432

[opsize]
max = 131072
min = 1
align = 512

[weights]
close_open = 0
read = 10
write = 10
mapread = 5
mapwrite = 5
invalidate = 1
truncate = 0
fsync = 1
fdatasync = 1
posix_fallocate = 0
punch_hole = 3
sendfile = 1
posix_fadvise = 1
copy_file_range = 0
"#;

/// The fsx binary: `FTLD_FSX`, then `PATH`, then `<target>/tools/bin/fsx` (where
/// `scripts/test` installs it; `<target>` is two levels above the ftld binary).
fn fsx_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FTLD_FSX") {
        return Some(PathBuf::from(p));
    }
    find_tool("fsx").or_else(|| {
        let p = std::path::Path::new(FTLD)
            .parent()?
            .parent()?
            .join("tools/bin/fsx");
        p.is_file().then_some(p)
    })
}

#[test]
fn fsx_50k_operations_on_the_export() {
    if !(require_root()
        && require_path("/dev/fuse", "FUSE; the fuse kernel module")
        && require_tool("nbdfuse", "libnbd-bin")
        && require_tool("fusermount3", "fuse3")
        && require_tool("losetup", "mount"))
    {
        return;
    }
    let Some(fsx) = fsx_binary() else {
        let what =
            "fsx not found (cargo install fsx --locked --root target/tools; ./scripts/test does)";
        assert!(!in_ci(), "{what}; CI must not skip this test");
        eprintln!("\n*** SKIP: {what} ***\n");
        return;
    };
    let seed: u64 = std::env::var("FTLD_FSX_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_nanos() as u64
                % 1_000_000_007
        });
    eprintln!("fsx seed {seed} (FTLD_FSX_SEED={seed} repeats it)");

    let _devices = serial();
    let mut d = Daemon::start(FTLD);
    let work = tempfile::Builder::new()
        .prefix("ftld-fsx-")
        .tempdir()
        .expect("tempdir");
    let config = work.path().join("fsx.toml");
    std::fs::write(&config, FSX_TOML).expect("writing fsx.toml");
    let artifacts = work.path().join("artifacts");
    std::fs::create_dir_all(&artifacts).expect("artifacts dir");

    let fuse = Nbdfuse::start(&work.path().join("fuse"), &d.uri());
    let lo = LoopDev::attach_with(&fuse.file(), &["--direct-io=on"]);
    let out = run(std::process::Command::new(&fsx)
        .arg("-f")
        .arg(&config)
        .arg("-N")
        .arg(OPS.to_string())
        .arg("-S")
        .arg(seed.to_string())
        .arg("-P")
        .arg(&artifacts)
        .arg(lo.dev()));
    drop(lo);
    drop(fuse);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let tail: Vec<&str> = text.lines().rev().take(80).collect();
    assert!(
        out.status.success() && text.contains("All operations completed A-OK"),
        "fsx failed (seed {seed}, {}):\n{}\n--- ftld log\n{}",
        out.status,
        tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        d.log()
    );

    let s = d.stats();
    let requests = &s["nbd"]["requests"];
    assert!(
        requests["trim"].as_u64().unwrap_or(0) > 0,
        "hole punches must reach the daemon as TRIM: {requests:#}"
    );
    assert!(requests["flush"].as_u64().unwrap_or(0) > 0, "{requests:#}");
    assert_eq!(s["ftl"]["nand_violations"], 0, "{:#}", s["ftl"]);
    assert!(d.stop().success(), "{}", d.log());
}
