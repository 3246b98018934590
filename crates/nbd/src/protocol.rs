//! NBD wire constants and the codec for the messages this server sends and receives.
//!
//! Every value here is taken from the NBD protocol document (`doc/proto.md` of
//! NetworkBlockDevice/nbd), sections "Newstyle negotiation", "Transmission" and "Values".
//! All integers on the wire are big-endian.
//!
//! Only the fixed newstyle handshake is spoken; the experimental `EXTENDED_HEADERS` and `RESIZE`
//! extensions are not implemented, so their constants only appear where the server must
//! recognise and refuse them. Of the metadata contexts, `base:allocation` is served.
//!
//! The encoders build a complete message in a `Vec<u8>` so that the writer can send it with one
//! `write_all`; the decoders take fixed-size byte arrays that the caller has read in full, so they
//! never fail on length and never panic on anything a peer sends.

// ---------------------------------------------------------------------------------------------
// Magic numbers
// ---------------------------------------------------------------------------------------------

/// `NBDMAGIC`, first 8 bytes the server sends.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`, sent by the server after `NBDMAGIC` and by the client before every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every fixed-newstyle option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// `NBD_REQUEST_MAGIC`.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// `NBD_SIMPLE_REPLY_MAGIC`.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// `NBD_STRUCTURED_REPLY_MAGIC`.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// ---------------------------------------------------------------------------------------------
// Handshake flags (server, 16 bits) and client flags (32 bits)
// ---------------------------------------------------------------------------------------------

/// Handshake flag: the server speaks fixed newstyle.
pub const NBD_FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: the server can omit the 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
pub const NBD_FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: the client speaks fixed newstyle.
pub const NBD_FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: the client does not want the 124 zero bytes.
pub const NBD_FLAG_C_NO_ZEROES: u32 = 1 << 1;

// ---------------------------------------------------------------------------------------------
// Transmission flags (16 bits)
// ---------------------------------------------------------------------------------------------

/// Must always be set.
pub const NBD_FLAG_HAS_FLAGS: u16 = 1 << 0;
/// The export is read-only.
pub const NBD_FLAG_READ_ONLY: u16 = 1 << 1;
/// `NBD_CMD_FLUSH` is supported.
pub const NBD_FLAG_SEND_FLUSH: u16 = 1 << 2;
/// `NBD_CMD_FLAG_FUA` is supported.
pub const NBD_FLAG_SEND_FUA: u16 = 1 << 3;
/// The export behaves like a rotational medium (never set by this server).
pub const NBD_FLAG_ROTATIONAL: u16 = 1 << 4;
/// `NBD_CMD_TRIM` is supported.
pub const NBD_FLAG_SEND_TRIM: u16 = 1 << 5;
/// `NBD_CMD_WRITE_ZEROES` (and `NBD_CMD_FLAG_NO_HOLE`) is supported.
pub const NBD_FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// `NBD_CMD_FLAG_DF` is supported on reads (only with structured replies).
pub const NBD_FLAG_SEND_DF: u16 = 1 << 7;
/// Flush and FUA are visible across all connections.
pub const NBD_FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
/// `NBD_CMD_CACHE` is understood.
pub const NBD_FLAG_SEND_CACHE: u16 = 1 << 10;
/// `NBD_CMD_FLAG_FAST_ZERO` is supported.
pub const NBD_FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

/// Choose an export and enter transmission (cannot report errors).
pub const NBD_OPT_EXPORT_NAME: u32 = 1;
/// Abort negotiation.
pub const NBD_OPT_ABORT: u32 = 2;
/// List exports.
pub const NBD_OPT_LIST: u32 = 3;
/// Withdrawn `PEEK_EXPORT` extension.
pub const NBD_OPT_PEEK_EXPORT: u32 = 4;
/// Upgrade to TLS (not supported here).
pub const NBD_OPT_STARTTLS: u32 = 5;
/// Describe an export.
pub const NBD_OPT_INFO: u32 = 6;
/// Describe an export and enter transmission.
pub const NBD_OPT_GO: u32 = 7;
/// Use structured replies in transmission.
pub const NBD_OPT_STRUCTURED_REPLY: u32 = 8;
/// List metadata contexts (`base:allocation` is the one served).
pub const NBD_OPT_LIST_META_CONTEXT: u32 = 9;
/// Select metadata contexts for `NBD_CMD_BLOCK_STATUS`.
pub const NBD_OPT_SET_META_CONTEXT: u32 = 10;
/// Experimental extended headers (not supported here).
pub const NBD_OPT_EXTENDED_HEADERS: u32 = 11;

// ---------------------------------------------------------------------------------------------
// Option replies
// ---------------------------------------------------------------------------------------------

/// Option accepted / list finished.
pub const NBD_REP_ACK: u32 = 1;
/// One export in an `NBD_OPT_LIST` answer.
pub const NBD_REP_SERVER: u32 = 2;
/// One piece of information in an `NBD_OPT_INFO`/`NBD_OPT_GO` answer.
pub const NBD_REP_INFO: u32 = 3;
/// One metadata context in an `NBD_OPT_LIST_META_CONTEXT`/`SET_META_CONTEXT` answer: its id,
/// then its name.
pub const NBD_REP_META_CONTEXT: u32 = 4;
/// Bit 31 marks an error reply.
pub const NBD_REP_FLAG_ERROR: u32 = 1 << 31;
/// Unknown option.
pub const NBD_REP_ERR_UNSUP: u32 = NBD_REP_FLAG_ERROR | 1;
/// Forbidden by policy.
pub const NBD_REP_ERR_POLICY: u32 = NBD_REP_FLAG_ERROR | 2;
/// Syntactically or semantically invalid option.
pub const NBD_REP_ERR_INVALID: u32 = NBD_REP_FLAG_ERROR | 3;
/// Not supported on this platform.
pub const NBD_REP_ERR_PLATFORM: u32 = NBD_REP_FLAG_ERROR | 4;
/// TLS required.
pub const NBD_REP_ERR_TLS_REQD: u32 = NBD_REP_FLAG_ERROR | 5;
/// Unknown export.
pub const NBD_REP_ERR_UNKNOWN: u32 = NBD_REP_FLAG_ERROR | 6;
/// The server is shutting down.
pub const NBD_REP_ERR_SHUTDOWN: u32 = NBD_REP_FLAG_ERROR | 7;
/// Block size information must be requested.
pub const NBD_REP_ERR_BLOCK_SIZE_REQD: u32 = NBD_REP_FLAG_ERROR | 8;
/// The request or the reply is too large.
pub const NBD_REP_ERR_TOO_BIG: u32 = NBD_REP_FLAG_ERROR | 9;

// ---------------------------------------------------------------------------------------------
// Info types (NBD_REP_INFO payloads)
// ---------------------------------------------------------------------------------------------

/// Size and transmission flags.
pub const NBD_INFO_EXPORT: u16 = 0;
/// Canonical export name.
pub const NBD_INFO_NAME: u16 = 1;
/// Human-readable description.
pub const NBD_INFO_DESCRIPTION: u16 = 2;
/// Minimum / preferred / maximum block sizes.
pub const NBD_INFO_BLOCK_SIZE: u16 = 3;

// ---------------------------------------------------------------------------------------------
// Commands and command flags
// ---------------------------------------------------------------------------------------------

/// Read.
pub const NBD_CMD_READ: u16 = 0;
/// Write (followed by `length` payload bytes).
pub const NBD_CMD_WRITE: u16 = 1;
/// Disconnect (no reply).
pub const NBD_CMD_DISC: u16 = 2;
/// Flush the volatile cache.
pub const NBD_CMD_FLUSH: u16 = 3;
/// Discard.
pub const NBD_CMD_TRIM: u16 = 4;
/// Prefetch hint.
pub const NBD_CMD_CACHE: u16 = 5;
/// Write zeroes without payload.
pub const NBD_CMD_WRITE_ZEROES: u16 = 6;
/// Block status of a range in the negotiated metadata contexts.
pub const NBD_CMD_BLOCK_STATUS: u16 = 7;

/// Force unit access: reply only once the command's data is durable.
pub const NBD_CMD_FLAG_FUA: u16 = 1 << 0;
/// Write zeroes: do not create a hole.
pub const NBD_CMD_FLAG_NO_HOLE: u16 = 1 << 1;
/// Read: do not fragment the structured reply.
pub const NBD_CMD_FLAG_DF: u16 = 1 << 2;
/// Block status: one extent only.
pub const NBD_CMD_FLAG_REQ_ONE: u16 = 1 << 3;
/// Write zeroes: fail with `ENOTSUP` unless zeroing is fast.
pub const NBD_CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// ---------------------------------------------------------------------------------------------
// Structured replies
// ---------------------------------------------------------------------------------------------

/// Last chunk of a structured reply.
pub const NBD_REPLY_FLAG_DONE: u16 = 1 << 0;
/// Empty final chunk.
pub const NBD_REPLY_TYPE_NONE: u16 = 0;
/// Data chunk: 64-bit offset then data.
pub const NBD_REPLY_TYPE_OFFSET_DATA: u16 = 1;
/// Hole chunk: 64-bit offset, 32-bit length.
pub const NBD_REPLY_TYPE_OFFSET_HOLE: u16 = 2;
/// Block status chunk: a context id, then (length, status flags) descriptors.
pub const NBD_REPLY_TYPE_BLOCK_STATUS: u16 = 5;
/// Generic error chunk.
pub const NBD_REPLY_TYPE_ERROR: u16 = (1 << 15) | 1;
/// Error chunk with the offset where the error happened.
pub const NBD_REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) | 2;

// ---------------------------------------------------------------------------------------------
// Metadata contexts
// ---------------------------------------------------------------------------------------------

/// The allocation context every NBD client knows (qemu-img map, nbdinfo --map, nbdcopy).
pub const BASE_ALLOCATION: &str = "base:allocation";
/// The id `base:allocation` is given in `NBD_REP_META_CONTEXT` (the server picks it; one
/// context, one id).
pub const BASE_ALLOCATION_ID: u32 = 1;
/// `base:allocation` status: the range is not allocated (a trimmed or never written page).
pub const NBD_STATE_HOLE: u32 = 1 << 0;
/// `base:allocation` status: the range reads as zeroes.
pub const NBD_STATE_ZERO: u32 = 1 << 1;

// ---------------------------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------------------------

/// The spec's upper bound for any string (export names, descriptions, error messages).
pub const MAX_STRING_LEN: usize = 4096;
/// Minimum block size advertised and enforced (offset and length alignment of requests).
pub const MIN_BLOCK_SIZE: u32 = 512;
/// Preferred block size advertised.
pub const PREFERRED_BLOCK_SIZE: u32 = 4096;
/// Maximum payload of a READ or WRITE, advertised and enforced (32 MiB).
pub const MAX_PAYLOAD: u32 = 32 << 20;
/// Length of the fixed part of a request.
pub const REQUEST_HEADER_LEN: usize = 28;
/// Length of an option header after the client flags: magic, option, length.
pub const OPTION_HEADER_LEN: usize = 16;

/// The transmission-phase error codes the server may send (`NBD_E*`).
///
/// They are fixed by the protocol and happen to equal Linux errno values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[repr(u32)]
pub enum Errno {
    /// `NBD_EPERM`: operation not permitted (write to a read-only export).
    Perm = 1,
    /// `NBD_EIO`: input/output error.
    Io = 5,
    /// `NBD_ENOMEM`: cannot allocate memory.
    NoMem = 12,
    /// `NBD_EINVAL`: invalid argument.
    Inval = 22,
    /// `NBD_ENOSPC`: no space left on device (write past the end).
    NoSpc = 28,
    /// `NBD_EOVERFLOW`: value too large.
    Overflow = 75,
    /// `NBD_ENOTSUP`: operation not supported.
    NotSup = 95,
    /// `NBD_ESHUTDOWN`: the server is shutting down.
    Shutdown = 108,
}

impl Errno {
    /// The value sent on the wire.
    pub fn code(self) -> u32 {
        self as u32
    }
}

/// A transmission-phase request header, as read from the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// Must equal [`REQUEST_MAGIC`]; checked by the caller so it can close the connection.
    pub magic: u32,
    /// Command flags (`NBD_CMD_FLAG_*`).
    pub flags: u16,
    /// Command type (`NBD_CMD_*`).
    pub kind: u16,
    /// Opaque cookie echoed in the reply.
    pub cookie: u64,
    /// Byte offset.
    pub offset: u64,
    /// Byte length.
    pub length: u32,
}

impl RequestHeader {
    /// Decodes the 28 header bytes.
    pub fn decode(b: &[u8; REQUEST_HEADER_LEN]) -> Self {
        Self {
            magic: be_u32(&b[0..4]),
            flags: be_u16(&b[4..6]),
            kind: be_u16(&b[6..8]),
            cookie: be_u64(&b[8..16]),
            offset: be_u64(&b[16..24]),
            length: be_u32(&b[24..28]),
        }
    }

    /// Encodes the header (used by tests and clients).
    pub fn encode(&self) -> [u8; REQUEST_HEADER_LEN] {
        let mut b = [0u8; REQUEST_HEADER_LEN];
        b[0..4].copy_from_slice(&self.magic.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.length.to_be_bytes());
        b
    }
}

/// Human-readable name of a command, for logs.
pub fn command_name(kind: u16) -> &'static str {
    match kind {
        NBD_CMD_READ => "READ",
        NBD_CMD_WRITE => "WRITE",
        NBD_CMD_DISC => "DISC",
        NBD_CMD_FLUSH => "FLUSH",
        NBD_CMD_TRIM => "TRIM",
        NBD_CMD_CACHE => "CACHE",
        NBD_CMD_WRITE_ZEROES => "WRITE_ZEROES",
        NBD_CMD_BLOCK_STATUS => "BLOCK_STATUS",
        _ => "UNKNOWN",
    }
}

/// Human-readable name of an option, for logs.
pub fn option_name(opt: u32) -> &'static str {
    match opt {
        NBD_OPT_EXPORT_NAME => "EXPORT_NAME",
        NBD_OPT_ABORT => "ABORT",
        NBD_OPT_LIST => "LIST",
        NBD_OPT_PEEK_EXPORT => "PEEK_EXPORT",
        NBD_OPT_STARTTLS => "STARTTLS",
        NBD_OPT_INFO => "INFO",
        NBD_OPT_GO => "GO",
        NBD_OPT_STRUCTURED_REPLY => "STRUCTURED_REPLY",
        NBD_OPT_LIST_META_CONTEXT => "LIST_META_CONTEXT",
        NBD_OPT_SET_META_CONTEXT => "SET_META_CONTEXT",
        NBD_OPT_EXTENDED_HEADERS => "EXTENDED_HEADERS",
        _ => "UNKNOWN",
    }
}

/// The server's opening: `NBDMAGIC`, `IHAVEOPT`, handshake flags.
pub fn encode_greeting(handshake_flags: u16) -> [u8; 18] {
    let mut b = [0u8; 18];
    b[0..8].copy_from_slice(&NBD_MAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..18].copy_from_slice(&handshake_flags.to_be_bytes());
    b
}

/// A fixed-newstyle option reply: magic, option, reply type, length, data.
pub fn encode_option_reply(option: u32, reply_type: u32, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(20 + data.len());
    b.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&reply_type.to_be_bytes());
    b.extend_from_slice(&len_u32(data.len()).to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// `NBD_INFO_EXPORT` payload: type, size, transmission flags.
pub fn encode_info_export(size: u64, flags: u16) -> Vec<u8> {
    let mut b = Vec::with_capacity(12);
    b.extend_from_slice(&NBD_INFO_EXPORT.to_be_bytes());
    b.extend_from_slice(&size.to_be_bytes());
    b.extend_from_slice(&flags.to_be_bytes());
    b
}

/// `NBD_INFO_BLOCK_SIZE` payload: type, minimum, preferred, maximum.
pub fn encode_info_block_size(min: u32, preferred: u32, max: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(14);
    b.extend_from_slice(&NBD_INFO_BLOCK_SIZE.to_be_bytes());
    b.extend_from_slice(&min.to_be_bytes());
    b.extend_from_slice(&preferred.to_be_bytes());
    b.extend_from_slice(&max.to_be_bytes());
    b
}

/// `NBD_INFO_NAME` / `NBD_INFO_DESCRIPTION` payload: type then the string.
pub fn encode_info_string(info: u16, s: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(2 + s.len());
    b.extend_from_slice(&info.to_be_bytes());
    b.extend_from_slice(s.as_bytes());
    b
}

/// `NBD_REP_SERVER` payload: name length, name, then the description as free text.
pub fn encode_rep_server(name: &str, description: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + name.len() + description.len());
    b.extend_from_slice(&len_u32(name.len()).to_be_bytes());
    b.extend_from_slice(name.as_bytes());
    b.extend_from_slice(description.as_bytes());
    b
}

/// Reply to `NBD_OPT_EXPORT_NAME`: size, flags and, unless `no_zeroes`, 124 zero bytes.
pub fn encode_export_name_reply(size: u64, flags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(134);
    b.extend_from_slice(&size.to_be_bytes());
    b.extend_from_slice(&flags.to_be_bytes());
    if !no_zeroes {
        b.resize(b.len() + 124, 0);
    }
    b
}

/// A simple reply header (the caller appends read data on success).
pub fn encode_simple_reply(cookie: u64, error: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// A structured reply chunk header announcing `payload_len` bytes of payload.
pub fn encode_structured_header(
    cookie: u64,
    flags: u16,
    reply_type: u16,
    payload_len: u32,
) -> [u8; 20] {
    let mut b = [0u8; 20];
    b[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&reply_type.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..20].copy_from_slice(&payload_len.to_be_bytes());
    b
}

/// A complete `NBD_REPLY_TYPE_ERROR` chunk (with `NBD_REPLY_FLAG_DONE`) carrying `message`,
/// truncated to the spec's string limit.
pub fn encode_structured_error(cookie: u64, errno: Errno, message: &str) -> Vec<u8> {
    let msg = truncate_str(message, MAX_STRING_LEN);
    let payload_len = 4 + 2 + msg.len();
    let mut b = Vec::with_capacity(20 + payload_len);
    b.extend_from_slice(&encode_structured_header(
        cookie,
        NBD_REPLY_FLAG_DONE,
        NBD_REPLY_TYPE_ERROR,
        len_u32(payload_len),
    ));
    b.extend_from_slice(&errno.code().to_be_bytes());
    // `msg.len() <= MAX_STRING_LEN` fits in 16 bits.
    b.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    b.extend_from_slice(msg.as_bytes());
    b
}

/// A complete `NBD_REPLY_TYPE_BLOCK_STATUS` chunk (with `NBD_REPLY_FLAG_DONE`) for context
/// `context` with `descriptors` of (length, status flags).
pub fn encode_block_status(cookie: u64, context: u32, descriptors: &[(u32, u32)]) -> Vec<u8> {
    let payload_len = 4 + 8 * descriptors.len();
    let mut b = Vec::with_capacity(20 + payload_len);
    b.extend_from_slice(&encode_structured_header(
        cookie,
        NBD_REPLY_FLAG_DONE,
        NBD_REPLY_TYPE_BLOCK_STATUS,
        len_u32(payload_len),
    ));
    b.extend_from_slice(&context.to_be_bytes());
    for (len, flags) in descriptors {
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(&flags.to_be_bytes());
    }
    b
}

/// Header of an `NBD_REPLY_TYPE_OFFSET_DATA` chunk (with `NBD_REPLY_FLAG_DONE`) for `data_len`
/// bytes at `offset`: the 20-byte chunk header followed by the 8-byte offset. The caller sends
/// the data right after it.
pub fn encode_offset_data_header(cookie: u64, offset: u64, data_len: u32) -> [u8; 28] {
    let mut b = [0u8; 28];
    b[0..20].copy_from_slice(&encode_structured_header(
        cookie,
        NBD_REPLY_FLAG_DONE,
        NBD_REPLY_TYPE_OFFSET_DATA,
        data_len.saturating_add(8),
    ));
    b[20..28].copy_from_slice(&offset.to_be_bytes());
    b
}

/// The longest prefix of `s` that is at most `max` bytes and ends on a char boundary.
pub fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Big-endian u16 from the first two bytes of `b` (callers pass exact slices).
pub fn be_u16(b: &[u8]) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[..2]);
    u16::from_be_bytes(a)
}

/// Big-endian u32 from the first four bytes of `b`.
pub fn be_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_be_bytes(a)
}

/// Big-endian u64 from the first eight bytes of `b`.
pub fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// A length the server built itself, as the 32-bit field of a message. Every message the server
/// builds is bounded (strings by [`MAX_STRING_LEN`], data by [`MAX_PAYLOAD`]), so this never
/// saturates in practice.
fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_header_roundtrip() {
        let h = RequestHeader {
            magic: REQUEST_MAGIC,
            flags: NBD_CMD_FLAG_FUA,
            kind: NBD_CMD_WRITE,
            cookie: 0x0102_0304_0506_0708,
            offset: 4096,
            length: 512,
        };
        assert_eq!(RequestHeader::decode(&h.encode()), h);
    }

    #[test]
    fn magic_values_match_ascii() {
        assert_eq!(&NBD_MAGIC.to_be_bytes(), b"NBDMAGIC");
        assert_eq!(&IHAVEOPT.to_be_bytes(), b"IHAVEOPT");
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        let s = "ééé"; // 6 bytes
        assert_eq!(truncate_str(s, 3), "é");
        assert_eq!(truncate_str(s, 10), s);
    }

    #[test]
    fn structured_error_layout() {
        let b = encode_structured_error(7, Errno::Inval, "bad");
        assert_eq!(be_u32(&b[0..4]), STRUCTURED_REPLY_MAGIC);
        assert_eq!(be_u16(&b[4..6]), NBD_REPLY_FLAG_DONE);
        assert_eq!(be_u16(&b[6..8]), NBD_REPLY_TYPE_ERROR);
        assert_eq!(be_u64(&b[8..16]), 7);
        assert_eq!(be_u32(&b[16..20]), 9);
        assert_eq!(be_u32(&b[20..24]), 22);
        assert_eq!(be_u16(&b[24..26]), 3);
        assert_eq!(&b[26..], b"bad");
    }
}
