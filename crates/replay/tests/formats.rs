//! Every trace format parsed from the fixtures in `tests/fixtures` (written by hand from each
//! format's documentation), guessed from its content, and malformed input refused with the
//! file and line.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use ftl_replay::{detect, Arrival, Format, Op, Request, TraceError, TraceReader};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn read(name: &str) -> (Format, Result<Vec<Request>, TraceError>) {
    let p = fixture(name);
    let mut r = BufReader::new(File::open(&p).expect("fixture"));
    let format = detect(&p, &mut r).expect("format guessed");
    let r = BufReader::new(File::open(&p).expect("fixture"));
    (format, TraceReader::new(&p, format, r).collect())
}

fn at(r: &Request) -> u64 {
    match r.arrival {
        Arrival::At(t) => t,
        Arrival::After(_) => panic!("trace requests have times"),
    }
}

fn shape(rs: &[Request]) -> Vec<(Op, u64, u64, u64)> {
    rs.iter().map(|r| (r.op, r.offset, r.len, at(r))).collect()
}

#[test]
fn msr_cambridge() {
    let (f, rs) = read("msr.csv");
    assert_eq!(f, Format::Msr);
    assert_eq!(
        shape(&rs.unwrap()),
        vec![
            (Op::Write, 3_338_240_000, 4096, 0),
            (Op::Read, 8192, 16384, 10_000),
            (Op::Write, 4096, 512, 1_000_000_000),
            (Op::Read, 4096, 4096, 2_000_000_000),
        ]
    );
}

#[test]
fn umass_spc() {
    let (f, rs) = read("umass.spc");
    assert_eq!(f, Format::Umass);
    assert_eq!(
        shape(&rs.unwrap()),
        vec![
            (Op::Write, 303_567 * 512, 3584, 0),
            (Op::Read, 1500 * 512, 8192, 512_000),
            (Op::Write, 2000 * 512, 4096, 10_000_000),
            (Op::Read, 40 * 512, 512, 1_500_000_000),
        ]
    );
}

#[test]
fn blkparse_text() {
    let (f, rs) = read("blkparse.txt");
    assert_eq!(f, Format::Blkparse);
    let rs = rs.unwrap();
    // D events only; FWFS = a flush, then a FUA write; DS = a discard; the summary ends it.
    assert_eq!(
        shape(&rs),
        vec![
            (Op::Write, 3_417_048 * 512, 4096, 0),
            (Op::Read, 2048 * 512, 32 * 512, 997_500),
            (Op::Flush, 0, 0, 1_997_500),
            (Op::Write, 4096 * 512, 4096, 1_997_500),
            (Op::Trim, 8192 * 512, 64 * 512, 2_997_500),
        ]
    );
    assert!(rs[3].fua && !rs[0].fua);
}

#[test]
fn fio_iologs() {
    let (f, rs) = read("fio_v2.log");
    assert_eq!(f, Format::Fio);
    assert_eq!(
        shape(&rs.unwrap()),
        vec![
            (Op::Write, 0, 4096, 0),
            (Op::Read, 0, 4096, 2_000_000),
            (Op::Flush, 0, 0, 2_000_000),
            (Op::Trim, 8192, 8192, 2_000_000),
        ]
    );
    let (f, rs) = read("fio_v3.log");
    assert_eq!(f, Format::Fio);
    assert_eq!(
        shape(&rs.unwrap()),
        vec![
            (Op::Write, 65536, 131_072, 0),
            (Op::Read, 65536, 4096, 2_000_000),
            (Op::Read, 0, 4096, 4_000_000),
        ]
    );
}

#[test]
fn disksim_ascii() {
    let (f, rs) = read("disksim.trace");
    assert_eq!(f, Format::Disksim);
    assert_eq!(
        shape(&rs.unwrap()),
        vec![
            (Op::Write, 1296 * 512, 8192, 0),
            (Op::Read, 1296 * 512, 4096, 250_000),
            (Op::Write, 64 * 512, 4096, 1_000_000),
        ]
    );
}

#[test]
fn a_malformed_line_is_refused_with_its_number() {
    let (f, rs) = read("bad_line.spc");
    assert_eq!(f, Format::Umass);
    let e = rs.unwrap_err().to_string();
    assert!(e.contains("bad_line.spc:3:"), "{e}");
    assert!(e.contains("opcode \"x\""), "{e}");
}

#[test]
fn content_that_fits_no_format_names_the_line() {
    let p = fixture("unknown.txt");
    let mut r = BufReader::new(File::open(&p).unwrap());
    let e = detect(&p, &mut r).unwrap_err().to_string();
    assert!(e.contains("unknown.txt:2:"), "{e}");
    assert!(e.contains("fits no trace format"), "{e}");
    // A named format that does not fit fails on the first line it cannot read.
    let r = BufReader::new(File::open(&p).unwrap());
    let e = TraceReader::new(&p, Format::Msr, r)
        .collect::<Result<Vec<_>, _>>()
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown.txt:2:"), "{e}");
}

#[test]
fn an_empty_trace_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("empty.csv");
    std::fs::write(&p, "# nothing\n\n").unwrap();
    let mut r = BufReader::new(File::open(&p).unwrap());
    assert!(matches!(detect(&p, &mut r), Err(TraceError::Empty { .. })));
    // blkparse with Q events only: a hint about D events.
    std::fs::write(&p, "  8,0 0 1 0.1 9 Q WS 8 + 8 [x]\n").unwrap();
    let r = BufReader::new(File::open(&p).unwrap());
    let e = TraceReader::new(&p, Format::Blkparse, r)
        .collect::<Result<Vec<_>, _>>()
        .unwrap_err()
        .to_string();
    assert!(e.contains("no D (issue) events"), "{e}");
}
