//! Every trace format parsed from the fixtures in `tests/fixtures` (written by hand from each
//! format's documentation), guessed from its content, and malformed input refused with the
//! file and line.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use ftl_replay::{detect, Arrival, DeviceSelect, Format, Op, Request, TraceError, TraceReader};

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

/// The error reading the trace at `p` as `format` ends with (the test fails if it reads).
fn read_err(p: &Path, format: Format) -> String {
    let r = BufReader::new(File::open(p).unwrap());
    TraceReader::new(p, format, r)
        .collect::<Result<Vec<_>, _>>()
        .unwrap_err()
        .to_string()
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
    // D events only; FWFS = a flush, then a FUA write; DS = a discard; the summary skipped.
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

/// Two captures concatenated: the first one's summary is skipped, and the second one's
/// events are read (they were dropped, the replay ending at the first summary).
#[test]
fn blkparse_events_after_a_summary_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("two.blk");
    std::fs::write(
        &p,
        "  8,0 0 1 0.1 9 D W 8 + 8 [x]\n\
         CPU0 (8,0):\n Reads Queued:           0,        0KiB\n\
         Total (8,0):\n Writes Queued:           1,        4KiB\n\
         Throughput (R/W): 0KiB/s / 40KiB/s\n\
         Events (8,0): 2 entries\n\
         \n  8,0 1 1 0.2 9 D W 16 + 8 [x]\n",
    )
    .unwrap();
    let r = BufReader::new(File::open(&p).unwrap());
    let rs = TraceReader::new(&p, Format::Blkparse, r)
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    assert_eq!(
        shape(&rs),
        vec![
            (Op::Write, 8 * 512, 4096, 0),
            (Op::Write, 16 * 512, 4096, 100_000_000)
        ]
    );
    // A damaged line after the summary is still refused.
    std::fs::write(
        &p,
        "  8,0 0 1 0.1 9 D W 8 + 8 [x]\nTotal (8,0):\n Writes Queued: 1, 4KiB\ngarbage here\n",
    )
    .unwrap();
    let e = read_err(&p, Format::Blkparse);
    assert!(e.contains("two.blk:4: not a blkparse event line"), "{e}");
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
fn alibaba_cloud_block_traces() {
    let (f, rs) = read("alibaba.csv");
    assert_eq!(f, Format::Alibaba);
    assert_eq!(
        shape(&rs.unwrap()),
        vec![
            (Op::Write, 126_703_644_672, 4096, 0),
            (Op::Read, 126_703_644_672, 4096, 124_000),
            (Op::Write, 8192, 16384, 1_000_000_000),
        ]
    );
}

#[test]
fn tencent_cbs_traces() {
    let (f, rs) = read("tencent.csv");
    assert_eq!(f, Format::Tencent);
    assert_eq!(
        shape(&rs.unwrap()),
        vec![
            (Op::Write, 2_097_152 * 512, 8192, 0),
            (Op::Read, 2_097_152 * 512, 4096, 0),
            (Op::Write, 0, 128 << 10, 3_000_000_000),
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
    let e = read_err(&p, Format::Msr);
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
    let e = read_err(&p, Format::Blkparse);
    assert!(e.contains("no D (issue) events"), "{e}");
    // Only blkparse's closing summary (the events were cut off): empty, not a replay of
    // nothing that exits 0.
    std::fs::write(
        &p,
        "CPU0 (8,0):\n Reads Queued:           0,        0KiB\n\
         Total (8,0):\n Reads Queued:           0,        0KiB\n",
    )
    .unwrap();
    let e = read_err(&p, Format::Blkparse);
    assert!(e.contains("no request in the trace"), "{e}");
}

/// A binary or compressed file given as a trace: refused at its first line, by line number,
/// without reading the whole file as one line (`/dev/zero` has no newline at all).
#[test]
fn a_binary_file_is_refused_as_not_text() {
    let p = Path::new("/dev/zero");
    let mut r = BufReader::new(File::open(p).unwrap());
    let e = detect(p, &mut r).unwrap_err().to_string();
    assert!(
        e.contains("/dev/zero:1:") && e.contains("not a text trace"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("trace.csv.gz");
    std::fs::write(&gz, [0x1f, 0x8b, 0x08, 0x00, 0xff, 0xfe, 0x80, 0x0a]).unwrap();
    let mut r = BufReader::new(File::open(&gz).unwrap());
    let e = detect(&gz, &mut r).unwrap_err().to_string();
    assert!(e.contains("trace.csv.gz:1: not UTF-8"), "{e}");
    let e = read_err(&gz, Format::Msr);
    assert!(e.contains("decompress it first"), "{e}");
}

/// Offsets whose byte address does not fit 64 bits are refused by line, not wrapped to 0.
#[test]
fn a_blkparse_sector_past_2_64_bytes_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("big.txt");
    std::fs::write(&p, "  8,0 0 1 0.1 1 D W 36028797018963968 + 8 [x]\n").unwrap();
    let e = read_err(&p, Format::Blkparse);
    assert!(
        e.contains("big.txt:1: sector 36028797018963968: past 2^64 bytes"),
        "{e}"
    );
}

/// A request that ends past 2^64 bytes is fitted as any request past the device's end
/// (refused, or wrapped into the device as `--out-of-range` says), never wrapped around 2^64 by
/// an overflow; one longer than the device is refused.
#[test]
fn a_request_ending_past_2_64_is_fitted_without_overflow() {
    use ftl_replay::{driver::fit, Adjusted, OutOfRange};
    let mut adjusted = Adjusted::default();
    let r = Request::new(0, Op::Write, u64::MAX - 511, 512);
    assert!(fit(&mut adjusted, r, 1 << 30, OutOfRange::Refuse).is_none());
    let r = Request::new(0, Op::Write, u64::MAX - 511, 4096);
    assert!(fit(&mut adjusted, r, 1 << 30, OutOfRange::Wrap)
        .is_some_and(|r| r.offset + r.len <= 1 << 30));
    let r = Request::new(0, Op::Write, 4096, u64::MAX);
    assert!(fit(&mut adjusted, r, 1 << 30, OutOfRange::Wrap).is_none());
    assert_eq!(adjusted.refused, 2, "{adjusted:?}");
    assert_eq!(adjusted.wrapped, 1, "{adjusted:?}");
}

/// One wrong digit in an MSR timestamp (filetime, 100 ns units) puts a request 158 years
/// later: refused by line rather than simulated.
#[test]
fn a_time_jump_of_years_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("jump.csv");
    std::fs::write(
        &p,
        "128166372003061629,hm,0,Write,0,4096,10\n\
         178166372003061729,hm,0,Read,8192,4096,10\n",
    )
    .unwrap();
    let e = read_err(&p, Format::Msr);
    assert!(e.contains("jump.csv:2: the time jumps 57870.4 days"), "{e}");
    // Backwards too: a corrupt first timestamp put every later request at the start.
    std::fs::write(
        &p,
        "178166372003061729,hm,0,Write,0,4096,10\n\
         128166372003061629,hm,0,Read,8192,4096,10\n",
    )
    .unwrap();
    let e = read_err(&p, Format::Msr);
    assert!(
        e.contains(
            "jump.csv:2: the time is 57870.4 days before the first request's: a wrong \
             timestamp (here"
        ),
        "{e}"
    );
    // A week apart is a real trace's night and weekend.
    std::fs::write(
        &p,
        "128166372003061629,hm,0,Write,0,4096,10\n\
         128172420003061629,hm,0,Read,8192,4096,10\n",
    )
    .unwrap();
    let r = BufReader::new(File::open(&p).unwrap());
    assert_eq!(TraceReader::new(&p, Format::Msr, r).count(), 2);
}

/// A byte-order mark before the first line (some Windows tools write one) is not data.
#[test]
fn a_byte_order_mark_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bom.csv");
    let msr = std::fs::read_to_string(fixture("msr.csv")).unwrap();
    std::fs::write(&p, format!("\u{feff}{msr}")).unwrap();
    let (f, rs) = {
        let mut r = BufReader::new(File::open(&p).unwrap());
        let f = detect(&p, &mut r).expect("format guessed");
        let r = BufReader::new(File::open(&p).unwrap());
        (f, TraceReader::new(&p, f, r).collect::<Result<Vec<_>, _>>())
    };
    assert_eq!(f, Format::Msr);
    assert_eq!(shape(&rs.unwrap()), shape(&read("msr.csv").1.unwrap()));
}

/// A CSV header as the first line (after comments), as spreadsheet and pandas exports of the
/// MSR, Alibaba and Tencent traces carry, is skipped, with or without `--format`; a header-like
/// line further down is still an error at its line.
#[test]
fn a_csv_header_line_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "msr.csv",
            "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime",
            Format::Msr,
        ),
        (
            "alibaba.csv",
            "device_id,opcode,offset,length,timestamp",
            Format::Alibaba,
        ),
        (
            "tencent.csv",
            "Timestamp, Offset, Size, IOType, VolumeID",
            Format::Tencent,
        ),
    ];
    for (name, header, format) in cases {
        let p = dir.path().join(name);
        let body = std::fs::read_to_string(fixture(name)).unwrap();
        std::fs::write(&p, format!("# exported\n{header}\n{body}")).unwrap();
        let mut r = BufReader::new(File::open(&p).unwrap());
        assert_eq!(detect(&p, &mut r).expect("format guessed"), format);
        let r = BufReader::new(File::open(&p).unwrap());
        let rs = TraceReader::new(&p, format, r).collect::<Result<Vec<_>, _>>();
        assert_eq!(shape(&rs.unwrap()), shape(&read(name).1.unwrap()), "{name}");
        // A second header (two files concatenated) is a malformed line, named.
        std::fs::write(&p, format!("{header}\n{body}{header}\n{body}")).unwrap();
        let e = read_err(&p, format);
        let second = body.lines().count() + 2;
        assert!(e.contains(&format!("{name}:{second}:")), "{e}");
    }
}

/// Reads the trace at `p` as `format` with `select`.
fn read_devices(
    p: &Path,
    format: Format,
    select: DeviceSelect,
) -> Result<Vec<Request>, TraceError> {
    let r = BufReader::new(File::open(p).unwrap());
    TraceReader::new(p, format, r)
        .select_devices(select)
        .collect()
}

/// A trace that names two devices is refused at the first line of the second, unless
/// `--device` chooses one (the other's lines are skipped, times count from the chosen one's
/// first request) or `all`; UMass ASUs are merged unless one is chosen.
#[test]
fn a_second_device_is_refused_unless_chosen() {
    let dir = tempfile::tempdir().unwrap();
    let blk = dir.path().join("two.blk");
    std::fs::write(
        &blk,
        "  8,0 0 1 0.000000000 1 D WS 0 + 8 [a]\n\
           8,16 0 2 0.001000000 1 D WS 8 + 8 [b]\n\
           8,0 0 3 0.002000000 1 D R 16 + 8 [a]\n\
           8,16 1 4 0.003000000 1 D FN [b]\n",
    )
    .unwrap();
    let e = read_devices(&blk, Format::Blkparse, DeviceSelect::Single)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("two.blk:2: a second device: this line's request is for 8,16, the first request's for 8,0")
            && e.contains("--device 8,0 (or --device 8,16)")
            && e.contains("--device all"),
        "{e}"
    );
    let only = read_devices(&blk, Format::Blkparse, DeviceSelect::Only("8,16".into())).unwrap();
    assert_eq!(
        shape(&only),
        vec![(Op::Write, 8 * 512, 4096, 0), (Op::Flush, 0, 0, 2_000_000)]
    );
    let all = read_devices(&blk, Format::Blkparse, DeviceSelect::All).unwrap();
    assert_eq!(all.len(), 4);
    let e = read_devices(&blk, Format::Blkparse, DeviceSelect::Only("8,32".into()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no request in the trace for device 8,32 (it names 8,0, 8,16)"),
        "{e}"
    );

    // MSR: hostname and disk number together.
    let msr = dir.path().join("two.csv");
    std::fs::write(
        &msr,
        "128166372003061629,hm,0,Write,0,4096,10\n\
         128166372003161629,hm,1,Write,4096,4096,10\n\
         128166372003261629,hm,1,Read,4096,4096,10\n",
    )
    .unwrap();
    let e = read_devices(&msr, Format::Msr, DeviceSelect::Single)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("two.csv:2: a second device") && e.contains("--device hm,1"),
        "{e}"
    );
    let only = read_devices(&msr, Format::Msr, DeviceSelect::Only("hm,1".into())).unwrap();
    assert_eq!(
        shape(&only),
        vec![
            (Op::Write, 4096, 4096, 0),
            (Op::Read, 4096, 4096, 10_000_000)
        ]
    );
    assert!(read_devices(&msr, Format::Msr, DeviceSelect::Only("hm".into())).is_err());

    // fio: two files of one job.
    let fio = dir.path().join("two.log");
    std::fs::write(
        &fio,
        "fio version 3 iolog\n0 a.dat add\n0 b.dat add\n10 a.dat write 0 4096\n\
         20 b.dat write 0 4096\n30 a.dat sync\n",
    )
    .unwrap();
    let e = read_devices(&fio, Format::Fio, DeviceSelect::Single)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("two.log:5: a second device") && e.contains("b.dat"),
        "{e}"
    );
    let only = read_devices(&fio, Format::Fio, DeviceSelect::Only("a.dat".into())).unwrap();
    assert_eq!(
        shape(&only),
        vec![(Op::Write, 0, 4096, 0), (Op::Flush, 0, 0, 20_000)]
    );

    // DiskSim device numbers.
    let ds = dir.path().join("two.trace");
    std::fs::write(&ds, "0.0 0 0 8 0\n1.0 3 0 8 0\n").unwrap();
    assert!(read_devices(&ds, Format::Disksim, DeviceSelect::Single).is_err());
    assert_eq!(
        read_devices(&ds, Format::Disksim, DeviceSelect::Only("3".into()))
            .unwrap()
            .len(),
        1
    );

    // The cloud traces: one file, many virtual disks.
    let ali = dir.path().join("ali.csv");
    std::fs::write(&ali, "0,W,0,4096,100\n1,W,0,4096,200\n0,R,0,4096,300\n").unwrap();
    let e = read_devices(&ali, Format::Alibaba, DeviceSelect::Single)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ali.csv:2: a second device") && e.contains("--device 1"),
        "{e}"
    );
    assert_eq!(
        shape(&read_devices(&ali, Format::Alibaba, DeviceSelect::Only("0".into())).unwrap()),
        vec![(Op::Write, 0, 4096, 0), (Op::Read, 0, 4096, 200_000)]
    );
    let tc = dir.path().join("tc.csv");
    std::fs::write(&tc, "10,0,8,1,7\n10,0,8,1,9\n11,0,8,0,9\n").unwrap();
    assert!(read_devices(&tc, Format::Tencent, DeviceSelect::Single).is_err());
    assert_eq!(
        shape(&read_devices(&tc, Format::Tencent, DeviceSelect::Only("9".into())).unwrap()),
        vec![(Op::Write, 0, 4096, 0), (Op::Read, 0, 4096, 1_000_000_000)]
    );

    // Numeric ids are the same device however they are spelt; names in messages are escaped
    // and quoted when they are not plain.
    let ds = dir.path().join("lz.trace");
    std::fs::write(&ds, "0.0 1 0 8 0\n1.0 01 8 8 0\n").unwrap();
    assert_eq!(
        read_devices(&ds, Format::Disksim, DeviceSelect::Single)
            .unwrap()
            .len(),
        2
    );
    let esc = dir.path().join("esc.log");
    std::fs::write(
        &esc,
        "fio version 3 iolog\n0 /dev/a write 0 4096\n1 /dev/b\x1b[31m write 0 4096\n",
    )
    .unwrap();
    let e = read_devices(&esc, Format::Fio, DeviceSelect::Single)
        .unwrap_err()
        .to_string();
    assert!(
        !e.contains('\x1b') && e.contains("'/dev/b\\u{1b}[31m'"),
        "{e}"
    );
    // A device the trace names only in lines that are not requests (blkparse Q events): the
    // hint about D events, not "it names ...".
    let q = dir.path().join("q.blk");
    std::fs::write(
        &q,
        "  8,0 0 1 0.0 1 D WS 0 + 8 [a]\n  8,16 0 2 0.1 1 Q WS 8 + 8 [b]\n",
    )
    .unwrap();
    let e = read_devices(&q, Format::Blkparse, DeviceSelect::Only("8,16".into()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no D (issue) events"), "{e}");
    // Nine devices: "and more" only past the eighth named.
    let many = dir.path().join("many.csv");
    let lines: String = (0..8).map(|d| format!("{d},W,0,4096,{d}\n")).collect();
    std::fs::write(&many, &lines).unwrap();
    let e = read_devices(&many, Format::Alibaba, DeviceSelect::Only("99".into()))
        .unwrap_err()
        .to_string();
    assert!(e.ends_with("(it names 0, 1, 2, 3, 4, 5, 6, 7)"), "{e}");
    std::fs::write(&many, format!("{lines}8,W,0,4096,9\n")).unwrap();
    let e = read_devices(&many, Format::Alibaba, DeviceSelect::Only("99".into()))
        .unwrap_err()
        .to_string();
    assert!(e.ends_with("6, 7 and more)"), "{e}");

    // UMass: every ASU by default (the fixture has three), one when chosen.
    let (_, merged) = read("umass.spc");
    assert_eq!(merged.unwrap().len(), 4);
    let asu0 = read_devices(
        &fixture("umass.spc"),
        Format::Umass,
        DeviceSelect::Only("0".into()),
    )
    .unwrap();
    assert_eq!(
        shape(&asu0),
        vec![
            (Op::Write, 303_567 * 512, 3584, 0),
            (Op::Write, 2000 * 512, 4096, 10_000_000)
        ]
    );
}

/// A request longer than any block request (64 MiB) is a corrupt line, refused by number: a
/// real-time replay would allocate buffers of its length in every worker.
#[test]
fn a_request_longer_than_64_mib_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("big.spc");
    std::fs::write(&p, "0,0,67108864,w,0.0\n0,0,67108865,w,0.1\n").unwrap();
    let e = read_err(&p, Format::Umass);
    assert!(
        e.contains("big.spc:2: a request of 67108865 bytes is above 64 MiB"),
        "{e}"
    );
    // A discard of a whole device (mkfs, fstrim) moves no data: any length is a request.
    let p = dir.path().join("mkfs.blk");
    std::fs::write(&p, "  0,0 0 1 0.000001000 0 D D 0 + 2097152 [ftld]\n").unwrap();
    let r = BufReader::new(File::open(&p).unwrap());
    let rs: Vec<Request> = TraceReader::new(&p, Format::Blkparse, r)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!((rs[0].op, rs[0].len), (Op::Trim, 1 << 30));
}
