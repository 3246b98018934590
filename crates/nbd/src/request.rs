//! One transmission-phase request: validation of the header into a [`Command`], execution
//! against the backend, and the encoded reply.
//!
//! # Validation order and error codes
//! The checks run in this order; the first that fails decides the reply (spec section "Error
//! values"; nbdkit's `validate_request` uses the same codes):
//! 1. unknown command (including `NBD_CMD_BLOCK_STATUS` when no metadata context was
//!    selected) → `NBD_EINVAL`;
//! 2. a flag not valid for the command → `NBD_EINVAL`. `FUA` is valid on every command (on
//!    `BLOCK_STATUS` it is ignored); `DF` on `READ` only with structured replies; `NO_HOLE` and `FAST_ZERO`
//!    on `WRITE_ZEROES`; `REQ_ONE` on `BLOCK_STATUS`;
//! 3. `FLUSH` with a non-zero offset or length → `NBD_EINVAL`;
//! 4. `WRITE`, `TRIM`, `WRITE_ZEROES` on a read-only export → `NBD_EPERM`;
//! 5. zero length → `NBD_EINVAL` (the spec leaves zero-length requests unspecified; like
//!    nbdkit we refuse them instead of passing them to the backend);
//! 6. offset or length not a multiple of 512 → `NBD_EINVAL`;
//! 7. `READ` / `WRITE` longer than 32 MiB → `NBD_EINVAL` (a `BLOCK_STATUS` length is a range,
//!    not a payload: any length);
//! 8. range past the end → `NBD_ENOSPC` for `WRITE` / `WRITE_ZEROES`, `NBD_EINVAL` otherwise.
//!
//! # Replies
//! Without structured replies everything gets a simple reply (read data follows a successful
//! read's header). With structured replies a successful read is one `OFFSET_DATA` chunk flagged
//! `DONE` (the whole read completes before the chunk is sent, so no error can follow it, and
//! `DF` is trivially honoured); any failure is one `NBD_REPLY_TYPE_ERROR` chunk carrying a
//! message. `ERROR_OFFSET` is not used because the backend does not report where a failure
//! happened. Other successful commands get a simple reply, which the spec allows, but
//! `BLOCK_STATUS`, whose answer is one `NBD_REPLY_TYPE_BLOCK_STATUS` chunk flagged `DONE`.

use crate::backend::{BlockBackend, Extent};
use crate::buffers::ReadBuffers;
use crate::error::RequestError;
use crate::protocol::*;
use crate::stats::Counters;
use std::sync::atomic::Ordering::Relaxed;

/// What the validator needs to know about the negotiated export.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExportParams {
    /// Export size in bytes (a multiple of 512).
    pub size: u64,
    /// Writes are refused.
    pub read_only: bool,
    /// Structured replies were negotiated.
    pub structured: bool,
    /// `base:allocation` was selected: `BLOCK_STATUS` is allowed.
    pub block_status: bool,
}

/// A validated request. Ranges are inside the export and 512-byte aligned, lengths non-zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    /// Read `len` bytes.
    Read { offset: u64, len: u32 },
    /// Write `len` bytes (the payload follows the header).
    Write { offset: u64, len: u32, fua: bool },
    /// Flush.
    Flush,
    /// Discard.
    Trim { offset: u64, len: u32, fua: bool },
    /// Prefetch hint; nothing to do beyond validation.
    Cache,
    /// Zero the range.
    WriteZeroes { offset: u64, len: u32, fua: bool },
    /// Allocation of the range (`base:allocation`); `one`: a single descriptor (`REQ_ONE`).
    BlockStatus { offset: u64, len: u32, one: bool },
}

/// For logs: the command as the protocol names it, with its range (`NBD_CMD_WRITE 4096+512 fua`).
impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let flag = |fua: bool| if fua { " fua" } else { "" };
        match *self {
            Command::Read { offset, len } => write!(f, "NBD_CMD_READ {offset}+{len}"),
            Command::Write { offset, len, fua } => {
                write!(f, "NBD_CMD_WRITE {offset}+{len}{}", flag(fua))
            }
            Command::Flush => f.write_str("NBD_CMD_FLUSH"),
            Command::Trim { offset, len, fua } => {
                write!(f, "NBD_CMD_TRIM {offset}+{len}{}", flag(fua))
            }
            Command::Cache => f.write_str("NBD_CMD_CACHE"),
            Command::WriteZeroes { offset, len, fua } => {
                write!(f, "NBD_CMD_WRITE_ZEROES {offset}+{len}{}", flag(fua))
            }
            Command::BlockStatus { offset, len, one } => write!(
                f,
                "NBD_CMD_BLOCK_STATUS {offset}+{len}{}",
                if one { " req_one" } else { "" }
            ),
        }
    }
}

/// Validates a request header (see the module doc for the order of checks).
pub(crate) fn validate(h: &RequestHeader, ex: &ExportParams) -> Result<Command, RequestError> {
    let name = command_name(h.kind);
    let allowed = match h.kind {
        NBD_CMD_READ if ex.structured => NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_DF,
        NBD_CMD_READ | NBD_CMD_WRITE | NBD_CMD_FLUSH | NBD_CMD_TRIM | NBD_CMD_CACHE => {
            NBD_CMD_FLAG_FUA
        }
        NBD_CMD_WRITE_ZEROES => NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO,
        // FUA: the spec has every command take it once advertised (ignored here).
        NBD_CMD_BLOCK_STATUS if ex.block_status => NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_REQ_ONE,
        kind => {
            return Err(RequestError::new(
                Errno::Inval,
                format!("unknown command {kind} ({name})"),
            ))
        }
    };
    if h.flags & !allowed != 0 {
        return Err(RequestError::new(
            Errno::Inval,
            format!("flags {:#x} not valid for {name}", h.flags & !allowed),
        ));
    }
    let fua = h.flags & NBD_CMD_FLAG_FUA != 0;
    if h.kind == NBD_CMD_FLUSH {
        if h.offset != 0 || h.length != 0 {
            return Err(RequestError::new(
                Errno::Inval,
                "FLUSH needs offset and length 0",
            ));
        }
        return Ok(Command::Flush);
    }
    let writes = matches!(h.kind, NBD_CMD_WRITE | NBD_CMD_TRIM | NBD_CMD_WRITE_ZEROES);
    if writes && ex.read_only {
        return Err(RequestError::new(
            Errno::Perm,
            format!("{name} on a read-only export"),
        ));
    }
    if h.length == 0 {
        return Err(RequestError::new(
            Errno::Inval,
            format!("zero-length {name}"),
        ));
    }
    let align = u64::from(MIN_BLOCK_SIZE);
    if !h.offset.is_multiple_of(align) || !u64::from(h.length).is_multiple_of(align) {
        return Err(RequestError::new(
            Errno::Inval,
            format!(
                "{name} at {}+{} is not aligned to {align} bytes",
                h.offset, h.length
            ),
        ));
    }
    if matches!(h.kind, NBD_CMD_READ | NBD_CMD_WRITE) && h.length > MAX_PAYLOAD {
        return Err(RequestError::new(
            Errno::Inval,
            format!("{name} of {} bytes exceeds {MAX_PAYLOAD}", h.length),
        ));
    }
    let in_range = h
        .offset
        .checked_add(u64::from(h.length))
        .is_some_and(|end| end <= ex.size);
    if !in_range {
        let errno = if matches!(h.kind, NBD_CMD_WRITE | NBD_CMD_WRITE_ZEROES) {
            Errno::NoSpc
        } else {
            Errno::Inval
        };
        return Err(RequestError::new(
            errno,
            format!(
                "{name} at {}+{} is past the end ({} bytes)",
                h.offset, h.length, ex.size
            ),
        ));
    }
    let (offset, len) = (h.offset, h.length);
    Ok(match h.kind {
        NBD_CMD_READ => Command::Read { offset, len },
        NBD_CMD_WRITE => Command::Write { offset, len, fua },
        NBD_CMD_TRIM => Command::Trim { offset, len, fua },
        NBD_CMD_CACHE => Command::Cache,
        NBD_CMD_BLOCK_STATUS => Command::BlockStatus {
            offset,
            len,
            one: h.flags & NBD_CMD_FLAG_REQ_ONE != 0,
        },
        // Only WRITE_ZEROES is left: unknown kinds returned above.
        _ => Command::WriteZeroes { offset, len, fua },
    })
}

/// An encoded reply: a header (plus small payload) and, for reads, the data to send after it.
#[derive(Debug)]
pub(crate) struct Reply {
    /// Bytes sent first.
    pub head: Vec<u8>,
    /// Read data sent after `head`, if any.
    pub data: Option<Vec<u8>>,
}

/// The reply for a request that failed, in the negotiated format.
pub(crate) fn error_reply(cookie: u64, err: &RequestError, structured: bool) -> Reply {
    let head = if structured {
        encode_structured_error(cookie, err.errno, &err.message)
    } else {
        encode_simple_reply(cookie, err.errno.code()).to_vec()
    };
    Reply { head, data: None }
}

/// Runs a validated command against the backend and encodes the reply. `payload` is the write
/// data for [`Command::Write`] and empty otherwise. Counts bytes and errors in `stats`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn execute<B: BlockBackend>(
    backend: &B,
    queue: usize,
    cookie: u64,
    cmd: Command,
    payload: Vec<u8>,
    ex: &ExportParams,
    stats: &Counters,
    buffers: &ReadBuffers,
) -> Reply {
    let result = match cmd {
        Command::Read { offset, len } => {
            // Its bytes are unspecified until the backend fills them all (`ReadBuffers`).
            let mut buf = buffers.take(len as usize);
            match backend.read(offset, &mut buf).await {
                Ok(()) => {
                    stats.bytes_read.fetch_add(len.into(), Relaxed);
                    return read_reply(cookie, offset, buf, ex.structured);
                }
                Err(e) => {
                    buffers.put(buf);
                    Err(e)
                }
            }
        }
        Command::Write { offset, len, fua } => {
            let r = backend.write(queue, offset, payload, fua).await;
            if r.is_ok() {
                stats.bytes_written.fetch_add(len.into(), Relaxed);
            }
            r
        }
        Command::Flush => backend.flush().await,
        Command::Trim { offset, len, fua } => backend.trim(queue, offset, len.into(), fua).await,
        Command::Cache => Ok(()),
        // NO_HOLE: the backend's zeroing keeps the range writable (an FTL has no holes to run
        // out of), so it satisfies NO_HOLE. FAST_ZERO: zeroing unmaps, which is fast.
        Command::WriteZeroes { offset, len, fua } => {
            backend.write_zeroes(queue, offset, len.into(), fua).await
        }
        Command::BlockStatus { offset, len, one } => {
            let max_runs = if one { 1 } else { MAX_STATUS_DESCRIPTORS };
            match backend.block_status(offset, len.into(), max_runs).await {
                Ok(extents) => {
                    let descriptors = descriptors(&extents, len, one);
                    return Reply {
                        head: encode_block_status(cookie, BASE_ALLOCATION_ID, &descriptors),
                        data: None,
                    };
                }
                Err(e) => Err(e),
            }
        }
    };
    match result {
        Ok(()) => Reply {
            head: encode_simple_reply(cookie, 0).to_vec(),
            data: None,
        },
        Err(e) => {
            let err = RequestError::from(e);
            tracing::warn!(cookie, %cmd, error = %err.message, "backend error");
            stats.error(err.errno);
            error_reply(cookie, &err, ex.structured)
        }
    }
}

/// `base:allocation` descriptors of `extents` (which start at the request's offset), for a
/// request of `len` bytes: neighbours of the same state merged, zero lengths dropped, the sum
/// at most `len` (the spec: a server may answer less than asked, never more), at least one
/// descriptor (a backend that answers nothing gets "allocated" for the whole range, the
/// status any server may always give), one if `one`.
fn descriptors(extents: &[Extent], len: u32, one: bool) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    let mut left = len;
    for e in extents {
        if left == 0 || out.len() > MAX_STATUS_DESCRIPTORS {
            break;
        }
        let n = u32::try_from(e.len).unwrap_or(u32::MAX).min(left);
        if n == 0 {
            continue;
        }
        left -= n;
        let flags = if e.hole {
            NBD_STATE_HOLE | NBD_STATE_ZERO
        } else {
            0
        };
        match out.last_mut() {
            Some((l, f)) if *f == flags => *l += n,
            _ => out.push((n, flags)),
        }
    }
    if out.is_empty() {
        out.push((len, 0));
    }
    out.truncate(if one { 1 } else { MAX_STATUS_DESCRIPTORS });
    out
}

/// Most descriptors in one `BLOCK_STATUS` reply: 64 Ki, a 512 KiB reply (the spec asks for at
/// most 2^20; a reply's memory is not in the connection's byte budget, so it stays small).
const MAX_STATUS_DESCRIPTORS: usize = 1 << 16;

/// A successful read's reply.
fn read_reply(cookie: u64, offset: u64, data: Vec<u8>, structured: bool) -> Reply {
    let head = if structured {
        // `data.len() <= MAX_PAYLOAD`, checked by `validate`.
        encode_offset_data_header(cookie, offset, data.len() as u32).to_vec()
    } else {
        encode_simple_reply(cookie, 0).to_vec()
    };
    Reply {
        head,
        data: Some(data),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Logs name a command as the protocol does, not as Rust's `Debug` prints the enum.
    #[test]
    fn commands_print_as_the_protocol_names_them() {
        let shown = [
            Command::Read {
                offset: 0,
                len: 65536,
            }
            .to_string(),
            Command::Write {
                offset: 4096,
                len: 512,
                fua: true,
            }
            .to_string(),
            Command::BlockStatus {
                offset: 0,
                len: 8,
                one: true,
            }
            .to_string(),
        ];
        assert_eq!(
            shown,
            [
                "NBD_CMD_READ 0+65536",
                "NBD_CMD_WRITE 4096+512 fua",
                "NBD_CMD_BLOCK_STATUS 0+8 req_one"
            ]
        );
    }

    const EX: ExportParams = ExportParams {
        size: 1 << 20,
        read_only: false,
        structured: false,
        block_status: false,
    };

    fn hdr(kind: u16, flags: u16, offset: u64, length: u32) -> RequestHeader {
        RequestHeader {
            magic: REQUEST_MAGIC,
            flags,
            kind,
            cookie: 1,
            offset,
            length,
        }
    }

    fn errno(h: RequestHeader, ex: &ExportParams) -> Option<Errno> {
        validate(&h, ex).err().map(|e| e.errno)
    }

    #[test]
    fn accepts_valid_requests() {
        assert_eq!(
            validate(&hdr(NBD_CMD_READ, NBD_CMD_FLAG_FUA, 512, 4096), &EX),
            Ok(Command::Read {
                offset: 512,
                len: 4096
            })
        );
        assert_eq!(
            validate(&hdr(NBD_CMD_FLUSH, NBD_CMD_FLAG_FUA, 0, 0), &EX),
            Ok(Command::Flush)
        );
        let wz = NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO;
        assert!(validate(&hdr(NBD_CMD_WRITE_ZEROES, wz, 0, 1 << 20), &EX).is_ok());
        assert_eq!(
            validate(&hdr(NBD_CMD_CACHE, 0, 0, 512), &EX),
            Ok(Command::Cache)
        );
    }

    #[test]
    fn error_codes_follow_the_spec() {
        let end = EX.size;
        assert_eq!(
            errno(hdr(NBD_CMD_READ, 0, end, 512), &EX),
            Some(Errno::Inval)
        );
        assert_eq!(
            errno(hdr(NBD_CMD_TRIM, 0, end, 512), &EX),
            Some(Errno::Inval)
        );
        assert_eq!(
            errno(hdr(NBD_CMD_CACHE, 0, end, 512), &EX),
            Some(Errno::Inval)
        );
        assert_eq!(
            errno(hdr(NBD_CMD_WRITE, 0, end, 512), &EX),
            Some(Errno::NoSpc)
        );
        assert_eq!(
            errno(hdr(NBD_CMD_WRITE_ZEROES, 0, end - 512, 1024), &EX),
            Some(Errno::NoSpc)
        );
        assert_eq!(errno(hdr(NBD_CMD_READ, 0, 1, 512), &EX), Some(Errno::Inval));
        assert_eq!(
            errno(hdr(NBD_CMD_WRITE, 0, 0, 100), &EX),
            Some(Errno::Inval)
        );
        assert_eq!(errno(hdr(NBD_CMD_READ, 0, 0, 0), &EX), Some(Errno::Inval));
        assert_eq!(errno(hdr(99, 0, 0, 512), &EX), Some(Errno::Inval));
        assert_eq!(
            errno(hdr(NBD_CMD_BLOCK_STATUS, 0, 0, 512), &EX),
            Some(Errno::Inval)
        );
        assert_eq!(
            errno(hdr(NBD_CMD_READ, 1 << 9, 0, 512), &EX),
            Some(Errno::Inval)
        );
        // DF only with structured replies.
        assert_eq!(
            errno(hdr(NBD_CMD_READ, NBD_CMD_FLAG_DF, 0, 512), &EX),
            Some(Errno::Inval)
        );
        let sr = ExportParams {
            structured: true,
            ..EX
        };
        assert_eq!(errno(hdr(NBD_CMD_READ, NBD_CMD_FLAG_DF, 0, 512), &sr), None);
        assert_eq!(
            errno(hdr(NBD_CMD_FLUSH, 0, 0, 512), &EX),
            Some(Errno::Inval)
        );
        let big = ExportParams {
            size: 1 << 40,
            ..EX
        };
        assert_eq!(
            errno(hdr(NBD_CMD_READ, 0, 0, MAX_PAYLOAD + 512), &big),
            Some(Errno::Inval)
        );
        // TRIM and WRITE_ZEROES may exceed the payload limit.
        assert_eq!(
            errno(hdr(NBD_CMD_TRIM, 0, 0, MAX_PAYLOAD + 512), &big),
            None
        );
        // Offset overflow.
        assert_eq!(
            errno(hdr(NBD_CMD_READ, 0, u64::MAX - 511, 512), &EX),
            Some(Errno::Inval)
        );
    }

    /// `BLOCK_STATUS` only once `base:allocation` was selected; `REQ_ONE` is its flag and
    /// `FUA` is taken as on every command; its length is a range (past 32 MiB is fine, past the end is not); a read-only
    /// export answers it.
    #[test]
    fn block_status_needs_its_context() {
        let bs = ExportParams {
            structured: true,
            block_status: true,
            size: 1 << 30,
            ..EX
        };
        assert_eq!(
            validate(
                &hdr(NBD_CMD_BLOCK_STATUS, NBD_CMD_FLAG_REQ_ONE, 512, 1 << 29),
                &bs
            ),
            Ok(Command::BlockStatus {
                offset: 512,
                len: 1 << 29,
                one: true
            })
        );
        let e = |flags, offset, len, ex| errno(hdr(NBD_CMD_BLOCK_STATUS, flags, offset, len), ex);
        assert_eq!(e(0, 0, 512, &bs), None);
        assert_eq!(e(0, 0, 512, &EX), Some(Errno::Inval), "no context");
        assert_eq!(
            e(NBD_CMD_FLAG_FUA, 0, 512, &bs),
            None,
            "FUA is taken (and ignored)"
        );
        assert_eq!(e(NBD_CMD_FLAG_DF, 0, 512, &bs), Some(Errno::Inval));
        assert_eq!(e(0, 0, 0, &bs), Some(Errno::Inval), "zero length");
        assert_eq!(e(0, 1, 512, &bs), Some(Errno::Inval), "unaligned");
        assert_eq!(
            e(0, (1 << 30) - 512, 1024, &bs),
            Some(Errno::Inval),
            "past the end"
        );
        let ro = ExportParams {
            read_only: true,
            ..bs
        };
        assert_eq!(e(0, 0, 512, &ro), None);
    }

    /// Descriptors merge neighbours of one state, never sum past the request, drop empty
    /// runs, always give one, and exactly one with `REQ_ONE`.
    #[test]
    fn block_status_descriptors() {
        let x = |len, hole| Extent { len, hole };
        const H: u32 = NBD_STATE_HOLE | NBD_STATE_ZERO;
        assert_eq!(
            descriptors(
                &[x(4096, true), x(0, false), x(4096, true), x(8192, false)],
                12288,
                false
            ),
            vec![(8192, H), (4096, 0)]
        );
        assert_eq!(
            descriptors(&[x(1 << 40, true)], 4096, false),
            vec![(4096, H)]
        );
        assert_eq!(descriptors(&[], 4096, false), vec![(4096, 0)]);
        assert_eq!(descriptors(&[x(0, true)], 4096, false), vec![(4096, 0)]);
        assert_eq!(
            descriptors(&[x(512, false), x(4096, true)], 8192, true),
            vec![(512, 0)]
        );
    }

    #[test]
    fn read_only_refuses_write_types() {
        let ro = ExportParams {
            read_only: true,
            ..EX
        };
        for kind in [NBD_CMD_WRITE, NBD_CMD_TRIM, NBD_CMD_WRITE_ZEROES] {
            assert_eq!(errno(hdr(kind, 0, 0, 512), &ro), Some(Errno::Perm));
        }
        assert_eq!(errno(hdr(NBD_CMD_READ, 0, 0, 512), &ro), None);
        assert_eq!(errno(hdr(NBD_CMD_FLUSH, 0, 0, 0), &ro), None);
    }
}
