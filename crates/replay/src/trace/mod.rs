//! Trace files: the five formats, guessing the format from the content, and a streaming
//! reader that names the file and line of anything it cannot use.
//!
//! | format | a line | time | offset, size |
//! |---|---|---|---|
//! | `msr` (MSR Cambridge) | `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime` | Windows filetime (100 ns ticks) | bytes |
//! | `umass` (UMass / SPC: Financial, WebSearch) | `ASU,LBA,Size,Opcode,Timestamp[,...]` | seconds | LBA in 512-byte sectors, size in bytes |
//! | `blkparse` (blktrace's text output) | `8,0 1 5 0.000123 4162 D WS 2048 + 8 [fio]` | seconds | sectors |
//! | `fio` (iolog v2 and v3) | `fio version 2 iolog` then `FILE read OFFSET LEN`; v3 `USEC FILE read OFFSET LEN` | v2: none (all at 0, `wait` lines add up); v3 us | bytes |
//! | `disksim` (DiskSim ASCII) | `TIME DEVNO BLKNO SIZE FLAGS` | ms | sectors; flag bit 0 set = read |
//! | `alibaba` (Alibaba Cloud block traces, 2020) | `device_id,opcode,offset,length,timestamp` | us | bytes |
//! | `tencent` (Tencent CBS, 2018) | `Timestamp,Offset,Size,IOType,VolumeID` | whole seconds | sectors; IOType 0 = read, 1 = write |
//!
//! Times are made relative to the first request's. blkparse: the `D`
//! (issued to the device) events are used, other actions are skipped; an RWBS with `F` first
//! is a flush before the request, `F` after the operation letter a FUA write; `D` in the
//! operation position is a discard (trim).
//!
//! **Devices.** Every line names the device it addresses: blkparse `MAJ,MIN`, MSR
//! `Hostname,DiskNumber`, DiskSim `DEVNO`, fio the file, UMass the ASU, Alibaba `device_id`,
//! Tencent `VolumeID` (those two files hold hundreds of virtual disks each). Two devices' offsets
//! are two address spaces, so a trace that names a second device is refused at its first line
//! unless [`DeviceSelect`] says which to replay ([`DeviceSelect::Only`], the others' lines are
//! skipped) or to lay them over one another ([`DeviceSelect::All`]). UMass/SPC traces are the
//! exception: their ASUs are merged by default (every ASU's LBAs address the one device), as
//! FlashSim and DiskSim-based FTL studies replay them.

mod alibaba;
mod blkparse;
mod disksim;
mod fio;
mod msr;
mod tencent;
mod umass;

use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::request::Request;

/// A trace format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Msr,
    Umass,
    Blkparse,
    Fio,
    Disksim,
    Alibaba,
    Tencent,
}

impl Format {
    pub const ALL: [Format; 7] = [
        Format::Msr,
        Format::Umass,
        Format::Blkparse,
        Format::Fio,
        Format::Disksim,
        Format::Alibaba,
        Format::Tencent,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Format::Msr => "msr",
            Format::Umass => "umass",
            Format::Blkparse => "blkparse",
            Format::Fio => "fio",
            Format::Disksim => "disksim",
            Format::Alibaba => "alibaba",
            Format::Tencent => "tencent",
        }
    }

    /// Whether `line` (not blank, not a comment) looks like a line of this format.
    fn fits(self, line: &str) -> bool {
        match self {
            Format::Msr => msr::parse(line).is_ok(),
            Format::Umass => umass::parse(line).is_ok(),
            Format::Blkparse => blkparse::is_event(line),
            Format::Fio => {
                line.starts_with("fio version 2 iolog") || line.starts_with("fio version 3 iolog")
            }
            Format::Disksim => disksim::parse(line).is_ok(),
            Format::Alibaba => alibaba::parse(line).is_ok(),
            Format::Tencent => tencent::parse(line).is_ok(),
        }
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        Format::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown trace format {s:?} (one of: {})",
                    Format::ALL.map(Format::name).join(", ")
                )
            })
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a trace cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {reason}")]
    Line {
        path: PathBuf,
        line: u64,
        reason: String,
    },
    #[error("{path}: no request in the trace{hint}")]
    Empty { path: PathBuf, hint: String },
}

/// A line's parse: a request, several (a blkparse flush before a write), or nothing to replay.
pub(crate) enum Parsed {
    One(Request),
    Two(Request, Request),
    Skip,
}

/// The device a line addresses, as the trace names it: one field, or two (MSR's hostname and
/// disk number). Shown as the fields joined by a comma, which is what `--device` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DeviceRef<'a>(pub &'a str, pub Option<&'a str>);

impl DeviceRef<'_> {
    fn is(&self, name: &str) -> bool {
        match self.1 {
            None => same_field(self.0, name),
            Some(b) => name
                .split_once(',')
                .is_some_and(|(x, y)| same_field(self.0, x) && same_field(b, y)),
        }
    }
}

/// Whether two device fields name the same device: equal as text, or as numbers (the
/// numeric ids are parsed as integers, so `01` is `1`, `+5` is `5`).
fn same_field(a: &str, b: &str) -> bool {
    a == b || matches!((a.parse::<u64>(), b.parse::<u64>()), (Ok(x), Ok(y)) if x == y)
}

/// A device name as a message shows it: control characters escaped, at most 64 characters,
/// and single-quoted unless it is plain (so a suggested `--device NAME` can be pasted).
fn shown(name: &str) -> String {
    let mut s: String = name
        .chars()
        .take(64)
        .collect::<String>()
        .escape_debug()
        .collect();
    if name.chars().count() > 64 {
        s.push_str("...");
    }
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || ",._/:+-".contains(c));
    if plain {
        s
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

impl std::fmt::Display for DeviceRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.1 {
            None => f.write_str(self.0),
            Some(b) => write!(f, "{},{b}", self.0),
        }
    }
}

/// Which of a trace's devices are replayed (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DeviceSelect {
    /// One device; a line naming another is an error (UMass: every ASU, merged).
    #[default]
    Single,
    /// Only this device's lines (as an error message names it: `8,16`, `hm,0`, `/dev/sdb`,
    /// an ASU or a DiskSim device number); the others' are skipped.
    Only(String),
    /// Every device's lines, laid over one address space.
    All,
}

impl std::str::FromStr for DeviceSelect {
    type Err = String;
    fn from_str(s: &str) -> Result<DeviceSelect, String> {
        match s.trim() {
            "" => Err("an empty device name".into()),
            "all" => Ok(DeviceSelect::All),
            s => Ok(DeviceSelect::Only(s.to_string())),
        }
    }
}

/// At most this many device names are kept for messages.
const DEVICES_NAMED: usize = 8;

fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

/// A CSV header line (`Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, as copies
/// of the MSR, Alibaba and Tencent traces exported by spreadsheets and pandas carry): two or
/// more comma-separated fields, each a name that starts with a letter. No trace's request line
/// looks like that (each starts with a number), so the first line that is not blank or a
/// comment is skipped when it is one.
fn is_csv_header(line: &str) -> bool {
    let mut fields = 0;
    for f in line.trim().split(',').map(str::trim) {
        let mut chars = f.chars();
        let name = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || " _-()/.".contains(c));
        if !name {
            return false;
        }
        fields += 1;
    }
    fields >= 2
}

/// Longest line a trace may have, its line end included. Real trace lines are under 200
/// bytes; a longer one is a binary or compressed file given by mistake, whose first "line"
/// could be the whole file (`/dev/zero` would never end).
const MAX_LINE: u64 = 64 * 1024;

/// Reads line `n` of the trace at `path` into `line` (appending); 0 at the end of the file.
fn read_line(
    path: &Path,
    reader: &mut impl BufRead,
    line: &mut String,
    n: u64,
) -> Result<usize, TraceError> {
    let not_text = |why: &str| TraceError::Line {
        path: path.to_path_buf(),
        line: n,
        reason: format!(
            "{why}: not a text trace (a compressed or binary file? decompress it first)"
        ),
    };
    let read = std::io::Read::take(&mut *reader, MAX_LINE + 1)
        .read_line(line)
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::InvalidData => not_text("not UTF-8"),
            _ => TraceError::Io {
                path: path.to_path_buf(),
                source,
            },
        })?;
    if read as u64 > MAX_LINE {
        return Err(not_text(&format!("longer than {MAX_LINE} bytes")));
    }
    // A byte-order mark (a file saved by some Windows tools) is not part of the first field.
    if n == 1 && line.starts_with('\u{feff}') {
        line.drain(..'\u{feff}'.len_utf8());
    }
    Ok(read)
}

/// Guesses the format from the first line that is not blank or a comment.
pub fn detect(path: &Path, reader: &mut impl BufRead) -> Result<Format, TraceError> {
    let mut n = 0u64;
    let mut line = String::new();
    // Bytes of blank and comment lines so far: the caller may keep them (to read them again
    // from a pipe), so a file of only comments is refused after a while.
    let mut skipped = 0u64;
    // Whether the first line that is not blank or a comment has been seen (a header may be it).
    let mut header_seen = false;
    loop {
        line.clear();
        if skipped > MAX_LINE * 16 {
            return Err(TraceError::Line {
                path: path.to_path_buf(),
                line: n,
                reason: format!("no request in the first {skipped} bytes (all blank or comments)"),
            });
        }
        let read = read_line(path, reader, &mut line, n + 1)?;
        skipped += read as u64;
        if read == 0 {
            return Err(TraceError::Empty {
                path: path.to_path_buf(),
                hint: String::new(),
            });
        }
        n += 1;
        if is_blank_or_comment(&line) {
            continue;
        }
        if !header_seen && is_csv_header(&line) {
            header_seen = true;
            continue;
        }
        let l = line.trim_end();
        // Order matters: a UMass line is also a plausible 5-field CSV of other shapes, an MSR
        // line has 7 fields with a textual type. The three 5-field CSVs differ in where the
        // operation is and how it is spelt: UMass 4th field r/w, Alibaba 2nd R/W, Tencent 4th
        // 0/1.
        for f in [
            Format::Fio,
            Format::Msr,
            Format::Umass,
            Format::Alibaba,
            Format::Tencent,
            Format::Blkparse,
            Format::Disksim,
        ] {
            if f.fits(l) {
                return Ok(f);
            }
        }
        return Err(TraceError::Line {
            path: path.to_path_buf(),
            line: n,
            reason: format!(
                "fits no trace format ({}): {:?}; name one with --format",
                Format::ALL.map(Format::name).join(", "),
                truncate(l)
            ),
        });
    }
}

fn truncate(l: &str) -> &str {
    match l.char_indices().nth(80) {
        Some((i, _)) => &l[..i],
        None => l,
    }
}

/// Reads requests from a trace, one line at a time.
pub struct TraceReader<R> {
    path: PathBuf,
    format: Format,
    reader: R,
    line: String,
    n: u64,
    /// Whether a line that is not blank or a comment was read (the first may be a CSV header).
    content_seen: bool,
    /// The first request's time: every time is made relative to it.
    origin: Option<u64>,
    pending: Option<Request>,
    fio: fio::State,
    blk: blkparse::State,
    requests: u64,
    done: bool,
    /// The latest request time so far (trace clock, ns).
    last_at: Option<u64>,
    devices: DeviceFilter,
}

/// Which lines' devices are replayed, and the devices seen so far.
struct DeviceFilter {
    select: DeviceSelect,
    /// The device of the first request replayed, when one device is expected.
    first: Option<String>,
    /// Devices the trace named, for messages (at most [`DEVICES_NAMED`]).
    seen: Vec<String>,
    /// More devices than `seen` holds were named.
    more: bool,
    /// With [`DeviceSelect::Only`]: the chosen device was named by some line.
    chosen_named: bool,
}

impl DeviceFilter {
    /// Whether a request of device `d` is replayed; why not, if it is a second device where
    /// one is expected.
    fn admit(&mut self, d: DeviceRef<'_>, format: Format) -> Result<bool, String> {
        self.note(d);
        match &self.select {
            DeviceSelect::All => Ok(true),
            DeviceSelect::Single if format == Format::Umass => Ok(true),
            DeviceSelect::Only(name) => Ok(d.is(name)),
            DeviceSelect::Single => match &self.first {
                None => {
                    self.first = Some(d.to_string());
                    Ok(true)
                }
                Some(first) if d.is(first) => Ok(true),
                Some(first) => {
                    let (first, d) = (shown(first), shown(&d.to_string()));
                    Err(format!(
                        "a second device: this line's request is for {d}, the first request's \
                         for {first}, and their offsets are two address spaces; replay one \
                         with --device {first} (or --device {d}), or every device over one \
                         address space with --device all"
                    ))
                }
            },
        }
    }

    /// Records that the trace names device `d` (on any line, a request or not).
    fn note(&mut self, d: DeviceRef<'_>) {
        if let DeviceSelect::Only(name) = &self.select {
            self.chosen_named |= d.is(name);
        }
        if !self.seen.iter().any(|s| d.is(s)) {
            if self.seen.len() < DEVICES_NAMED {
                self.seen.push(d.to_string());
            } else {
                self.more = true;
            }
        }
    }

    /// The devices seen, for a message.
    fn named(&self) -> String {
        let names: Vec<String> = self.seen.iter().map(|s| shown(s)).collect();
        let more = if self.more { " and more" } else { "" };
        format!("{}{more}", names.join(", "))
    }
}

/// Longest pause between a trace's requests: 30 days (the MSR Cambridge traces span a week).
const MAX_GAP_NS: u64 = 30 * 86_400_000_000_000;

impl<R: BufRead> TraceReader<R> {
    pub fn new(path: &Path, format: Format, reader: R) -> TraceReader<R> {
        TraceReader {
            path: path.to_path_buf(),
            format,
            reader,
            line: String::new(),
            n: 0,
            content_seen: false,
            origin: None,
            pending: None,
            fio: fio::State::default(),
            blk: blkparse::State::default(),
            requests: 0,
            done: false,
            last_at: None,
            devices: DeviceFilter {
                select: DeviceSelect::Single,
                first: None,
                seen: Vec::new(),
                more: false,
                chosen_named: false,
            },
        }
    }

    /// Which of the trace's devices to replay (by default one, or every UMass ASU merged).
    pub fn select_devices(mut self, select: DeviceSelect) -> TraceReader<R> {
        self.devices.select = select;
        self
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Refuses a request that arrives more than [`MAX_GAP_NS`] after the previous one (a
    /// virtual-time run would simulate the whole gap), or reads or writes more than
    /// [`crate::request::MAX_REQUEST_BYTES`] (a trim moves no data: `mkfs` and `fstrim`
    /// discard whole devices in one request).
    fn check_request(&mut self, r: &Request) -> Result<(), TraceError> {
        let moves_data = matches!(r.op, crate::request::Op::Read | crate::request::Op::Write);
        if moves_data && r.len > crate::request::MAX_REQUEST_BYTES {
            return Err(TraceError::Line {
                path: self.path.clone(),
                line: self.n,
                reason: format!(
                    "a request of {} bytes is above 64 MiB, more than any block request \
                     (a corrupt length field?)",
                    r.len
                ),
            });
        }
        if let crate::request::Arrival::At(t) = r.arrival {
            if let Some(prev) = self.last_at.filter(|&p| t > p.saturating_add(MAX_GAP_NS)) {
                return Err(TraceError::Line {
                    path: self.path.clone(),
                    line: self.n,
                    reason: format!(
                        "the time jumps {:.1} days after the previous request's: a wrong \
                         timestamp? (requests more than {} days apart are refused: a \
                         virtual-time replay simulates the idle time between them)",
                        (t - prev) as f64 / 86_400e9,
                        MAX_GAP_NS / 86_400_000_000_000
                    ),
                });
            }
            // A time far before the first request's is as wrong (a corrupt first timestamp
            // would otherwise put every later request at the start, silently); one a little
            // before is replayed at the start (`rebase`), as the driver moves any request up
            // to the one before it.
            if let Some(first) = self.origin.filter(|&o| t.saturating_add(MAX_GAP_NS) < o) {
                return Err(TraceError::Line {
                    path: self.path.clone(),
                    line: self.n,
                    reason: format!(
                        "the time is {:.1} days before the first request's: a wrong timestamp \
                         (here or on the first request)? (requests more than {} days apart \
                         are refused)",
                        (first - t) as f64 / 86_400e9,
                        MAX_GAP_NS / 86_400_000_000_000
                    ),
                });
            }
            self.last_at = Some(self.last_at.map_or(t, |p| p.max(t)));
        }
        Ok(())
    }

    fn rebase(&mut self, mut r: Request) -> Request {
        if let crate::request::Arrival::At(t) = r.arrival {
            let origin = *self.origin.get_or_insert(t);
            r.arrival = crate::request::Arrival::At(t.saturating_sub(origin));
            r.before_first = t < origin;
        }
        r
    }

    /// The error of a trace that ended with no request in it, with a hint at why.
    fn empty(&self) -> TraceError {
        let hint = match (&self.devices.select, self.format) {
            (DeviceSelect::Only(name), _)
                if !self.devices.seen.is_empty() && !self.devices.chosen_named =>
            {
                format!(
                    " for device {} (it names {})",
                    shown(name),
                    self.devices.named()
                )
            }
            (_, Format::Blkparse) if self.blk.queued > 0 => format!(
                " ({} Q events but no D (issue) events: was the trace recorded with the device's \
                 queue?)",
                self.blk.queued
            ),
            (DeviceSelect::Only(name), _) => format!(" for device {}", shown(name)),
            _ => String::new(),
        };
        TraceError::Empty {
            path: self.path.clone(),
            hint,
        }
    }

    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        if let Some(r) = self.pending.take() {
            return Ok(Some(r));
        }
        loop {
            self.line.clear();
            let read = read_line(&self.path, &mut self.reader, &mut self.line, self.n + 1)?;
            if read == 0 {
                if self.requests == 0 {
                    return Err(self.empty());
                }
                return Ok(None);
            }
            self.n += 1;
            if is_blank_or_comment(&self.line) {
                continue;
            }
            if !self.content_seen {
                self.content_seen = true;
                if is_csv_header(&self.line) {
                    continue;
                }
            }
            let line = self.line.trim_end();
            let one = |(r, d)| (Parsed::One(r), Some(d));
            let parsed = match self.format {
                Format::Msr => msr::parse(line).map(one),
                Format::Umass => umass::parse(line).map(one),
                Format::Disksim => disksim::parse(line).map(one),
                Format::Alibaba => alibaba::parse(line).map(one),
                Format::Tencent => tencent::parse(line).map(one),
                Format::Blkparse => self.blk.parse(line),
                Format::Fio => self.fio.parse(line),
            };
            let (parsed, device) = parsed.map_err(|reason| TraceError::Line {
                path: self.path.clone(),
                line: self.n,
                reason: format!("{reason}: {:?}", truncate(line)),
            })?;
            let parsed = match (parsed, device) {
                (p @ (Parsed::One(_) | Parsed::Two(..)), Some(d)) => {
                    let admit = self.devices.admit(d, self.format);
                    match admit.map_err(|reason| TraceError::Line {
                        path: self.path.clone(),
                        line: self.n,
                        reason,
                    })? {
                        true => p,
                        false => Parsed::Skip,
                    }
                }
                (p, d) => {
                    if let Some(d) = d {
                        self.devices.note(d);
                    }
                    p
                }
            };
            match parsed {
                Parsed::Skip => {}
                Parsed::One(r) => {
                    self.check_request(&r)?;
                    self.requests += 1;
                    return Ok(Some(self.rebase(r)));
                }
                Parsed::Two(a, b) => {
                    self.check_request(&a)?;
                    self.check_request(&b)?;
                    self.requests += 2;
                    let b = self.rebase(b);
                    self.pending = Some(b);
                    return Ok(Some(self.rebase(a)));
                }
            }
        }
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<Request, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_request() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Parses a decimal number of seconds (or milliseconds, with `scale` 1e6) into nanoseconds
/// without going through a float, so times are exact.
pub(crate) fn parse_decimal_ns(s: &str, ns_per_unit: u64, field: &str) -> Result<u64, String> {
    let bad = || format!("{field} {s:?} is not a non-negative decimal number");
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, f),
        None => (s, ""),
    };
    if int.is_empty() && frac.is_empty() {
        return Err(bad());
    }
    let int: u64 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| bad())?
    };
    let mut frac_ns = 0u64;
    let mut unit = ns_per_unit;
    for c in frac.chars() {
        // Every character is a digit, also past the clock's resolution (whose digits drop).
        let d = c.to_digit(10).ok_or_else(bad)? as u64;
        unit /= 10;
        frac_ns += d * unit;
    }
    int.checked_mul(ns_per_unit)
        .and_then(|v| v.checked_add(frac_ns))
        .ok_or_else(|| format!("{field} {s:?} is too large"))
}

pub(crate) fn parse_u64(s: &str, field: &str) -> Result<u64, String> {
    let s = s.trim();
    s.parse().map_err(|e: std::num::ParseIntError| {
        if *e.kind() == std::num::IntErrorKind::PosOverflow {
            format!("{field} {s:?} is too large (more than 2^64 - 1)")
        } else {
            format!("{field} {s:?} is not a non-negative integer")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_integer_past_64_bits_is_called_too_large() {
        let e = parse_u64(" 99999999999999999999999", "offset").unwrap_err();
        assert_eq!(
            e,
            "offset \"99999999999999999999999\" is too large (more than 2^64 - 1)"
        );
        let e = parse_u64("-5", "offset").unwrap_err();
        assert!(e.contains("is not a non-negative integer"), "{e}");
        assert_eq!(parse_u64(" 18446744073709551615 ", "offset"), Ok(u64::MAX));
    }

    #[test]
    fn digits_past_the_resolution_are_checked_too() {
        assert_eq!(
            parse_decimal_ns("0.12345678912", 1_000_000_000, "t"),
            Ok(123_456_789)
        );
        assert!(parse_decimal_ns("0.1234567891x", 1_000_000_000, "t").is_err());
    }

    #[test]
    fn decimal_times_are_exact() {
        assert_eq!(
            parse_decimal_ns("0.551706", 1_000_000_000, "t"),
            Ok(551_706_000)
        );
        assert_eq!(parse_decimal_ns("12", 1_000_000, "t"), Ok(12_000_000));
        assert_eq!(parse_decimal_ns("1.5", 1_000_000, "t"), Ok(1_500_000));
        assert_eq!(parse_decimal_ns(".25", 1_000_000_000, "t"), Ok(250_000_000));
        assert!(parse_decimal_ns("-1", 1, "t").is_err());
        assert!(parse_decimal_ns("1e3", 1, "t").is_err());
        assert!(parse_decimal_ns("", 1, "t").is_err());
    }
}
