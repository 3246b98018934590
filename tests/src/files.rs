//! A deterministic tree of files and a `sha256sum` manifest of it, for write-then-verify tests.

use std::fs;
use std::path::{Path, PathBuf};

use crate::{run, run_ok, tool};

/// Sizes of the files written per directory: empty, sub-sector, unaligned and multi-MiB ones.
const SIZES: [usize; 8] = [0, 1, 511, 4096, 10_000, 131_072, 1 << 20, 3 << 20];

/// Writes a tree of files under `root` whose contents derive from `seed`, `fsync`s each file,
/// and returns their paths relative to `root`.
pub fn write_tree(root: &Path, seed: u64) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (d, dir) in ["a", "b/c", "b/d/e"].into_iter().enumerate() {
        fs::create_dir_all(root.join(dir)).expect("creating directories");
        for (i, &size) in SIZES.iter().enumerate() {
            let rel = PathBuf::from(dir).join(format!("f{i}.bin"));
            let data = content(seed ^ ((d as u64) << 32 | i as u64), size);
            fs::write(root.join(&rel), &data).expect("writing a file");
            fs::File::open(root.join(&rel))
                .and_then(|f| f.sync_all())
                .expect("fsync");
            out.push(rel);
        }
    }
    out
}

/// `size` pseudo-random bytes from `seed` (xorshift64*).
pub fn content(seed: u64, size: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(size + 8);
    while v.len() < size {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    v.truncate(size);
    v
}

/// `sha256sum` of `files` (relative to `root`): the manifest text.
pub fn manifest(root: &Path, files: &[PathBuf]) -> String {
    run_ok(tool("sha256sum").args(files).current_dir(root))
}

/// Checks every file of `manifest` under `root` (`sha256sum -c`); panics naming the failures.
pub fn verify(root: &Path, manifest: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let list = dir.path().join("manifest");
    fs::write(&list, manifest).expect("writing the manifest");
    let out = run(tool("sha256sum")
        .args(["-c", "--strict", "--quiet"])
        .arg(&list)
        .current_dir(root));
    assert!(
        out.status.success(),
        "checksums differ under {}:\n{}{}",
        root.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
