//! Every `ImageError` variant, produced from a real file.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{small_config, small_geometry, Fixture};
use nand_model::{Geometry, ImageError, NandConfig, NandDevice, TimingMode};

/// A closed, valid image in a temp dir.
fn closed_image() -> Fixture {
    let mut f = Fixture::small();
    f.dev = None;
    f
}

fn open(path: &Path) -> Result<NandDevice, ImageError> {
    NandDevice::open(path, None, TimingMode::Off)
}

fn patch(path: &Path, at: u64, bytes: &[u8]) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(bytes, at).unwrap();
}

/// Rewrites the header CRC so a deliberate field change passes the checksum.
fn fix_crc(path: &Path) {
    let mut h = vec![0u8; 4096];
    let file = std::fs::File::open(path).unwrap();
    file.read_exact_at(&mut h, 0).unwrap();
    let crc = crc32fast::hash(&h[..4092]);
    patch(path, 4092, &crc.to_le_bytes());
}

#[test]
fn not_found() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(&dir.path().join("missing.img")).unwrap_err();
    assert!(matches!(e, ImageError::NotFound { .. }), "{e}");
}

/// Creating in a directory that does not exist (or in one that takes no new files, as /proc)
/// names the directory, not "image ...: not found" (the image is what is being made).
#[test]
fn create_in_a_missing_directory_names_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("x.img");
    let e = NandDevice::create(&path, &small_config(), TimingMode::Off).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, ImageError::Io { .. }), "{text}");
    assert!(
        text.contains("cannot be created: its directory")
            && text.contains("no-such-dir does not exist"),
        "{text}"
    );
    if Path::new("/proc/self").exists() {
        let e = NandDevice::create(Path::new("/proc/x.img"), &small_config(), TimingMode::Off)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("its directory /proc does not exist or takes no new files"),
            "{e}"
        );
    }
}

#[test]
fn create_refuses_to_overwrite() {
    let f = closed_image();
    let e = NandDevice::create(&f.path, &small_config(), TimingMode::Off).unwrap_err();
    assert!(matches!(e, ImageError::AlreadyExists { .. }), "{e}");
    // The existing image is untouched.
    open(&f.path).unwrap();
}

#[test]
fn not_an_image() {
    let f = closed_image();
    patch(&f.path, 0, b"NOTNAND!");
    let e = open(&f.path).unwrap_err();
    assert!(matches!(e, ImageError::NotAnImage { .. }), "{e}");
}

#[test]
fn flipped_byte_gives_bad_checksum() {
    let f = closed_image();
    patch(&f.path, 30, &[0x7F]);
    let e = open(&f.path).unwrap_err();
    assert!(matches!(e, ImageError::BadChecksum { .. }), "{e}");
}

/// A header whose checksum holds but whose size field is not this build's is called that,
/// not "bad magic" (it was).
#[test]
fn another_header_size_is_named() {
    let f = closed_image();
    patch(&f.path, 12, &8192u32.to_le_bytes());
    fix_crc(&f.path);
    let e = open(&f.path).unwrap_err();
    assert!(
        matches!(
            e,
            ImageError::HeaderSize {
                found: 8192,
                expected: 4096,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("8192 bytes"), "{e}");
}

#[test]
fn other_version() {
    // 1 is the format before frame tables: its data would be read from the wrong offsets; 3
    // is a PMCD device's and 4 a multi-level cell device's (tested in `header.rs`), 5 does
    // not exist.
    for version in [1u32, 5] {
        let f = closed_image();
        patch(&f.path, 8, &version.to_le_bytes());
        fix_crc(&f.path);
        let e = open(&f.path).unwrap_err();
        assert!(
            matches!(
                e,
                ImageError::UnsupportedVersion {
                    found,
                    supported: 2,
                    ..
                } if found == version
            ),
            "{e}"
        );
        let e =
            nand_model::page_data_offset(&f.path, nand_model::PageAddr::new(0, 0, 0)).unwrap_err();
        assert!(matches!(e, ImageError::UnsupportedVersion { .. }), "{e}");
    }
}

#[test]
fn corrupt_frame_table_entry() {
    let f = closed_image();
    // The frame table follows the header and the block table (4 banks x 8 blocks x 16 B,
    // padded to 4 KiB); bank 1 starts 32 pages x 4 B later. Entry 5 of bank 1 names frame
    // 0x1233, far outside the bank's 32 frames.
    patch(&f.path, 8192 + 32 * 4 + 5 * 4, &0x1234u32.to_le_bytes());
    let e = open(&f.path).unwrap_err();
    assert!(
        matches!(
            e,
            ImageError::CorruptFrameTable {
                bank: 1,
                page: 5,
                ..
            }
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains(&f.path.display().to_string()) && msg.contains("out of range"),
        "{msg}"
    );
    // The offline helper refuses the same entry (page 5 of bank 1 is block 1, page 1).
    let e = nand_model::page_data_offset(&f.path, nand_model::PageAddr::new(1, 1, 1)).unwrap_err();
    assert!(
        matches!(
            e,
            ImageError::CorruptFrameTable {
                bank: 1,
                page: 5,
                ..
            }
        ),
        "{e}"
    );
    assert!(nand_model::page_data_offset(&f.path, nand_model::PageAddr::new(1, 1, 2)).is_ok());
}

/// Latencies in the header are bounded whatever the format version: an image whose read
/// "takes" 584 years would overflow every sum of latencies an FTL computes (a GC step's cost,
/// a response bound) and make a virtual-time run wait forever.
#[test]
fn an_absurd_latency_in_the_header_is_refused() {
    for (at, field) in [(48u64, "t_read"), (56, "t_prog"), (64, "t_erase")] {
        let f = closed_image();
        patch(&f.path, at, &u64::MAX.to_le_bytes());
        fix_crc(&f.path);
        let e = open(&f.path).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(&f.path.display().to_string())
                && msg.contains(&format!("{field} must be at most 1000000000 ns")),
            "{msg}"
        );
        // A second is still a (slow) device.
        patch(&f.path, at, &1_000_000_000u64.to_le_bytes());
        fix_crc(&f.path);
        open(&f.path).unwrap();
    }
    // So is the channel: a byte a second would make one page's transfer take an hour.
    let f = closed_image();
    patch(&f.path, 72, &1u64.to_le_bytes());
    fix_crc(&f.path);
    let msg = open(&f.path).unwrap_err().to_string();
    assert!(
        msg.contains("channel_bytes_per_sec must be 0 (instant) or at least 1000000"),
        "{msg}"
    );
}

#[test]
fn corrupt_block_table_entry() {
    let f = closed_image();
    // The block table follows the 4 KiB header, 16 B per block (4 banks x 8 blocks of 4
    // pages). Block 2 of bank 1 is entry 10; its programmed-page count is at byte 8. A block
    // "with" 5 programmed pages would send every scan of it past its end.
    patch(&f.path, 4096 + 10 * 16 + 8, &5u32.to_le_bytes());
    let e = open(&f.path).unwrap_err();
    assert!(
        matches!(
            e,
            ImageError::CorruptBlockTable {
                bank: 1,
                block: 2,
                programmed_pages: 5,
                pages_per_block: 4,
                ..
            }
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains(&f.path.display().to_string()) && msg.contains("programmed_pages is 5"),
        "{msg}"
    );
    // A full block is fine.
    patch(&f.path, 4096 + 10 * 16 + 8, &4u32.to_le_bytes());
    open(&f.path).unwrap();
}

#[test]
fn geometry_mismatch_per_field() {
    let f = closed_image();
    let g = small_geometry();
    let cases: [(&str, Geometry); 6] = [
        ("channels", Geometry { channels: 4, ..g }),
        (
            "banks_per_channel",
            Geometry {
                banks_per_channel: 1,
                ..g
            },
        ),
        (
            "blocks_per_bank",
            Geometry {
                blocks_per_bank: 16,
                ..g
            },
        ),
        (
            "pages_per_block",
            Geometry {
                pages_per_block: 8,
                ..g
            },
        ),
        (
            "page_size",
            Geometry {
                page_size: 8192,
                ..g
            },
        ),
        ("oob_size", Geometry { oob_size: 64, ..g }),
    ];
    for (field, want) in cases {
        let e = NandDevice::open(&f.path, Some(&want), TimingMode::Off).unwrap_err();
        match &e {
            ImageError::GeometryMismatch { field: got, .. } => assert_eq!(*got, field),
            other => panic!("{field}: {other}"),
        }
    }
    let e = NandDevice::open(
        &f.path,
        Some(&Geometry {
            page_size: 8192,
            ..g
        }),
        TimingMode::Off,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "image {}: geometry mismatch in page_size: image has 4096, requested 8192",
            f.path.display()
        )
    );
}

#[test]
fn truncated_file() {
    let f = closed_image();
    let full = std::fs::metadata(&f.path).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&f.path)
        .unwrap();
    file.set_len(full - 4096).unwrap();
    let e = open(&f.path).unwrap_err();
    match e {
        ImageError::Truncated {
            expected, actual, ..
        } => assert_eq!((expected, actual), (full, full - 4096)),
        other => panic!("{other}"),
    }
    // Shorter than the header itself.
    file.set_len(100).unwrap();
    assert!(matches!(
        open(&f.path),
        Err(ImageError::Truncated {
            expected: 4096,
            actual: 100,
            ..
        })
    ));
    // An empty file, too.
    file.set_len(0).unwrap();
    assert!(matches!(open(&f.path), Err(ImageError::Truncated { .. })));
}

#[test]
fn invalid_geometry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.img");
    let mut cfg: NandConfig = small_config();
    cfg.geometry.page_size = 1000;
    let e = NandDevice::create(&path, &cfg, TimingMode::Off).unwrap_err();
    assert!(matches!(e, ImageError::InvalidGeometry { .. }), "{e}");
    assert!(!path.exists(), "nothing is created for an invalid config");
    // An image whose stored geometry is invalid (but checksummed) is refused the same way.
    let f = closed_image();
    patch(&f.path, 32, &1000u32.to_le_bytes());
    fix_crc(&f.path);
    let e = open(&f.path).unwrap_err();
    assert!(matches!(e, ImageError::InvalidGeometry { .. }), "{e}");
}

#[test]
fn io_error_for_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path()).unwrap_err();
    assert!(matches!(e, ImageError::Io { .. }), "{e}");
    assert_eq!(e.path(), dir.path());
}

#[test]
fn second_open_in_this_process_is_refused() {
    let f = Fixture::small();
    let e = open(&f.path).unwrap_err();
    match e {
        ImageError::Locked { pid, .. } => assert_eq!(pid, Some(std::process::id() as i32)),
        other => panic!("{other}"),
    }
    // The refused open must not have dropped the first device's POSIX lock (closing any fd of
    // a file releases the process's locks): the device is still usable and still exclusive.
    f.dev()
        .program(nand_model::PageAddr::new(0, 0, 0), &[0; 4096], &[])
        .unwrap()
        .wait();
    assert!(open(&f.path).is_err());
}

const HOLD_ENV: &str = "NAND_MODEL_TEST_HOLD_IMAGE";

/// Not a test on its own: when run as a child with `HOLD_ENV` set, opens the image, says
/// "locked", and holds it until its stdin closes.
#[test]
fn lock_holder_child() {
    let Ok(path) = std::env::var(HOLD_ENV) else {
        return;
    };
    let dev = open(Path::new(&path)).expect("child open");
    // Written to the real stdout (print! would be captured by the test harness); it may share
    // a line with the harness's "test lock_holder_child ... ".
    let mut out = std::io::stdout();
    writeln!(out, "locked").unwrap();
    out.flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    drop(dev);
}

#[test]
fn second_process_is_refused_with_its_pid() {
    // POSIX locks are per process: only another process can show the fcntl lock at work.
    let f = closed_image();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "lock_holder_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOLD_ENV, &f.path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the child's "locked" line on a helper thread, so a broken child fails the test
    // after a timeout instead of hanging it.
    let out = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Keep draining after the line: closing the pipe early would make the child's
        // harness fail with EPIPE when it reports its result.
        for line in out.lines().map_while(Result::ok) {
            if line.trim_end().ends_with("locked") {
                let _ = tx.send(true);
            }
        }
        let _ = tx.send(false);
    });
    if rx.recv_timeout(Duration::from_secs(60)) != Ok(true) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("child did not lock the image");
    }
    let e = open(&f.path).unwrap_err();
    match &e {
        ImageError::Locked { pid, .. } => assert_eq!(*pid, Some(child.id() as i32)),
        other => panic!("{other}"),
    }
    assert!(
        e.to_string()
            .contains(&format!("locked by process {}", child.id())),
        "{e}"
    );
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    // Once the holder is gone the image opens.
    open(&f.path).unwrap();
}

/// A FIFO in the image's place is refused at once, naming what it is (a read-only open would
/// wait for a writer; a writable one failed its reads with "Illegal seek").
#[test]
fn a_fifo_is_refused_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fifo.img");
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) with a NUL-terminated path that lives through the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for access in [nand_model::Access::ReadOnly, nand_model::Access::ReadWrite] {
        let e = NandDevice::open_with(&path, None, TimingMode::Off, access).unwrap_err();
        assert!(
            matches!(e, ImageError::Io { .. }) && e.to_string().contains("a FIFO"),
            "{e}"
        );
    }
}
