//! The fixed newstyle handshake: greeting, client flags, then option haggling until the client
//! enters transmission (`NBD_OPT_GO` or `NBD_OPT_EXPORT_NAME`), aborts, or breaks the protocol.
//!
//! Supported options: `EXPORT_NAME`, `ABORT`, `LIST`, `INFO`, `GO`, `STRUCTURED_REPLY`,
//! `LIST_META_CONTEXT`, `SET_META_CONTEXT` (one context, `base:allocation`; `SET` needs
//! structured replies first, as the spec says) and, when the server has a [`TlsPolicy`] other
//! than off, `STARTTLS`. Every other option gets `NBD_REP_ERR_UNSUP` and negotiation
//! continues, as the spec's baseline requires.
//!
//! TLS (see [`crate::tls`] for the modes): [`negotiate`] returns [`Outcome::StartTls`] after
//! acknowledging `STARTTLS`; the connection then runs the TLS handshake and calls
//! [`negotiate`] again on the encrypted stream with `tls_active` set. No option state from
//! before the upgrade survives it (the spec: a `STRUCTURED_REPLY` sent in the clear is
//! forgotten); the option limit counts both halves together.
//!
//! One export exists. It is found under its configured name and under the empty name (the
//! spec's "default export"); any other name gets `NBD_REP_ERR_UNKNOWN` (or, for
//! `NBD_OPT_EXPORT_NAME`, which cannot report errors, a closed connection).
//!
//! Limits against hostile clients (the spec lets a server hard-disconnect on a denial of
//! service):
//! - an option payload up to [`MAX_OPTION_LEN`] bytes is read and handled; that is enough for
//!   the largest valid `INFO`/`GO` (a 4096-byte name and 2046 info requests);
//! - a longer payload up to [`MAX_DISCARD_OPTION_LEN`] is read, thrown away and answered with
//!   `NBD_REP_ERR_TOO_BIG`; anything longer closes the connection;
//! - `NBD_OPT_EXPORT_NAME` longer than the spec's 4096-byte string limit closes the connection;
//! - at most [`MAX_OPTIONS`] options per connection.
//!
//! Once the server is shutting down, every option but `ABORT` gets `NBD_REP_ERR_SHUTDOWN`
//! (`EXPORT_NAME` closes); the caller bounds the whole handshake with a timeout and drops it a
//! grace period after shutdown.

use crate::error::ProtocolError;
use crate::protocol::*;
use crate::server::ShutdownSignal;
use crate::tls::TlsMode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::debug;

/// Largest option payload the server reads and handles.
pub const MAX_OPTION_LEN: u32 = 8192;
/// Largest option payload the server reads and discards (answering `NBD_REP_ERR_TOO_BIG`).
pub const MAX_DISCARD_OPTION_LEN: u32 = 1 << 20;
/// Largest number of options one connection may send.
pub const MAX_OPTIONS: usize = 128;

/// What the handshake needs to know about the export.
#[derive(Debug, Clone)]
pub(crate) struct ExportInfo {
    /// Canonical export name.
    pub name: String,
    /// Human-readable description (may be empty).
    pub description: String,
    /// Export size in bytes, a multiple of [`MIN_BLOCK_SIZE`].
    pub size: u64,
    /// Whether the export refuses writes.
    pub read_only: bool,
}

impl ExportInfo {
    /// Whether `name` selects this export.
    fn matches(&self, name: &str) -> bool {
        name.is_empty() || name == self.name
    }
}

/// What was agreed for the transmission phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Negotiated {
    /// Structured replies were negotiated.
    pub structured: bool,
    /// `base:allocation` was selected (the last `SET_META_CONTEXT` chose it), so
    /// `NBD_CMD_BLOCK_STATUS` is allowed.
    pub block_status: bool,
    /// Transmission flags sent to the client.
    pub flags: u16,
}

/// How the handshake ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Enter transmission.
    Transmission(Negotiated),
    /// The client sent `NBD_OPT_ABORT`.
    Aborted,
    /// `NBD_OPT_STARTTLS` was acknowledged: the next bytes are the client's TLS handshake.
    StartTls,
}

/// Where a connection's option haggling stands, across the upgrade to TLS.
#[derive(Debug)]
pub(crate) struct Haggling {
    /// The server's TLS mode (as it applies to this client: `Off` for one that did not
    /// negotiate fixed newstyle, as the spec requires).
    pub tls: TlsMode,
    /// TLS has been initiated on this connection.
    pub tls_active: bool,
    /// Options received so far (bounded by [`MAX_OPTIONS`]).
    pub options: usize,
    /// The client set `NBD_FLAG_C_NO_ZEROES`.
    pub no_zeroes: bool,
}

impl Haggling {
    /// Before TLS is initiated in `require` mode, only `STARTTLS` and `ABORT` are served.
    fn tls_required(&self) -> bool {
        self.tls == TlsMode::Require && !self.tls_active
    }
}

/// The transmission flags advertised for an export.
///
/// A read-only export advertises `READ_ONLY` and none of the write-type commands (they are still
/// recognised and answered with `NBD_EPERM`). `SEND_DF` only with structured replies, as the
/// spec requires.
pub(crate) fn transmission_flags(read_only: bool, structured: bool) -> u16 {
    let mut f = NBD_FLAG_HAS_FLAGS
        | NBD_FLAG_SEND_FLUSH
        | NBD_FLAG_SEND_FUA
        | NBD_FLAG_SEND_CACHE
        | NBD_FLAG_CAN_MULTI_CONN;
    if read_only {
        f |= NBD_FLAG_READ_ONLY;
    } else {
        f |= NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_FAST_ZERO;
    }
    if structured {
        f |= NBD_FLAG_SEND_DF;
    }
    f
}

/// Sends the greeting and reads the client's flags. `tls` is the server's mode.
pub(crate) async fn greet<R, W>(
    r: &mut R,
    w: &mut W,
    tls: TlsMode,
) -> Result<Haggling, ProtocolError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    w.write_all(&encode_greeting(
        NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES,
    ))
    .await?;
    w.flush().await?;

    let client_flags = r.read_u32().await?;
    if client_flags & !(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES) != 0 {
        return Err(ProtocolError::UnknownClientFlags(client_flags));
    }
    let fixed = client_flags & NBD_FLAG_C_FIXED_NEWSTYLE != 0;
    if !fixed {
        // The spec lets a server honour fixed newstyle anyway; old clients only ever send
        // NBD_OPT_EXPORT_NAME, which behaves the same in both dialects.
        debug!("client did not set NBD_FLAG_C_FIXED_NEWSTYLE");
    }
    Ok(Haggling {
        // TLS needs fixed newstyle; such a client gets NOTLS, except that `require` still
        // refuses to serve it in the clear.
        tls: if fixed || tls == TlsMode::Require {
            tls
        } else {
            TlsMode::Off
        },
        tls_active: false,
        options: 0,
        no_zeroes: client_flags & NBD_FLAG_C_NO_ZEROES != 0,
    })
}

/// Haggles over options until the client enters transmission, aborts, or asks for TLS. The
/// writer is flushed before every read.
pub(crate) async fn negotiate<R, W>(
    r: &mut R,
    w: &mut W,
    export: &ExportInfo,
    shutdown: &ShutdownSignal,
    state: &mut Haggling,
) -> Result<Outcome, ProtocolError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut structured = false;
    let mut block_status = false;
    while state.options < MAX_OPTIONS {
        state.options += 1;
        let mut hdr = [0u8; OPTION_HEADER_LEN];
        r.read_exact(&mut hdr).await?;
        let magic = be_u64(&hdr[0..8]);
        if magic != IHAVEOPT {
            return Err(ProtocolError::BadMagic {
                expected: IHAVEOPT,
                found: magic,
            });
        }
        let option = be_u32(&hdr[8..12]);
        let len = be_u32(&hdr[12..16]);
        debug!(option = option_name(option), len, "option");

        if option == NBD_OPT_EXPORT_NAME {
            if shutdown.is_set() {
                return Err(ProtocolError::ShuttingDown);
            }
            if state.tls_required() {
                // This option cannot answer with an error: the spec says to close.
                return Err(ProtocolError::TlsRequired);
            }
            let agreed = Negotiated {
                structured,
                block_status,
                flags: transmission_flags(export.read_only, structured),
            };
            return export_name(r, w, export, len, agreed, state.no_zeroes).await;
        }
        if len > MAX_DISCARD_OPTION_LEN {
            return Err(ProtocolError::TooLarge {
                what: "option payload",
                len: len.into(),
            });
        }
        if len > MAX_OPTION_LEN {
            if option == NBD_OPT_SET_META_CONTEXT {
                // A SET replaces the earlier selection even when it fails (the spec).
                block_status = false;
            }
            discard(r, len.into()).await?;
            let msg = format!("option payload of {len} bytes exceeds {MAX_OPTION_LEN}");
            reply(w, option, NBD_REP_ERR_TOO_BIG, msg.as_bytes()).await?;
            continue;
        }
        let mut data = vec![0u8; len as usize];
        r.read_exact(&mut data).await?;

        if shutdown.is_set() && option != NBD_OPT_ABORT {
            let msg = b"server is shutting down";
            reply(w, option, NBD_REP_ERR_SHUTDOWN, msg).await?;
            continue;
        }
        if state.tls_required() && option != NBD_OPT_STARTTLS && option != NBD_OPT_ABORT {
            let msg = b"this server requires TLS: send NBD_OPT_STARTTLS first";
            reply(w, option, NBD_REP_ERR_TLS_REQD, msg).await?;
            continue;
        }
        match option {
            NBD_OPT_ABORT => {
                // The client may already be gone; the spec asks both sides to cope.
                let _ = reply(w, option, NBD_REP_ACK, &[]).await;
                return Ok(Outcome::Aborted);
            }
            NBD_OPT_LIST => {
                if !data.is_empty() {
                    reply(
                        w,
                        option,
                        NBD_REP_ERR_INVALID,
                        b"NBD_OPT_LIST takes no data",
                    )
                    .await?;
                } else {
                    let server = encode_rep_server(&export.name, &export.description);
                    w.write_all(&encode_option_reply(option, NBD_REP_SERVER, &server))
                        .await?;
                    reply(w, option, NBD_REP_ACK, &[]).await?;
                }
            }
            NBD_OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    let msg = b"NBD_OPT_STRUCTURED_REPLY takes no data";
                    reply(w, option, NBD_REP_ERR_INVALID, msg).await?;
                } else {
                    structured = true;
                    reply(w, option, NBD_REP_ACK, &[]).await?;
                }
            }
            NBD_OPT_STARTTLS => {
                if !data.is_empty() {
                    let msg = b"NBD_OPT_STARTTLS takes no data";
                    reply(w, option, NBD_REP_ERR_INVALID, msg).await?;
                } else if state.tls_active {
                    let msg = b"TLS is already active";
                    reply(w, option, NBD_REP_ERR_INVALID, msg).await?;
                } else if state.tls == TlsMode::Off {
                    let msg = b"TLS is not enabled on this server (ftld --tls)";
                    reply(w, option, NBD_REP_ERR_POLICY, msg).await?;
                } else {
                    reply(w, option, NBD_REP_ACK, &[]).await?;
                    return Ok(Outcome::StartTls);
                }
            }
            NBD_OPT_INFO | NBD_OPT_GO => {
                if info_or_go(w, option, &data, export, structured).await? && option == NBD_OPT_GO {
                    return Ok(Outcome::Transmission(Negotiated {
                        structured,
                        block_status,
                        flags: transmission_flags(export.read_only, structured),
                    }));
                }
            }
            NBD_OPT_LIST_META_CONTEXT | NBD_OPT_SET_META_CONTEXT => {
                let set = option == NBD_OPT_SET_META_CONTEXT;
                if set {
                    // A SET replaces the earlier selection, even when it fails (the spec):
                    // only a successful one below selects anything again.
                    block_status = false;
                }
                if set && !structured {
                    let msg = b"NBD_OPT_SET_META_CONTEXT needs NBD_OPT_STRUCTURED_REPLY first";
                    reply(w, option, NBD_REP_ERR_INVALID, msg).await?;
                    continue;
                }
                match parse_meta_request(&data) {
                    Err(msg) => reply(w, option, NBD_REP_ERR_INVALID, msg.as_bytes()).await?,
                    Ok(req) if !export.matches(&req.name) => {
                        let msg = format!("unknown export {:?}", truncate_str(&req.name, 256));
                        reply(w, option, NBD_REP_ERR_UNKNOWN, msg.as_bytes()).await?;
                    }
                    Ok(req) => {
                        let chosen = req.selects_base_allocation(set);
                        if chosen {
                            // A listed context's id SHOULD be 0 (the spec): only SET assigns.
                            let id = if set { BASE_ALLOCATION_ID } else { 0 };
                            let mut ctx = id.to_be_bytes().to_vec();
                            ctx.extend_from_slice(BASE_ALLOCATION.as_bytes());
                            w.write_all(&encode_option_reply(option, NBD_REP_META_CONTEXT, &ctx))
                                .await?;
                        }
                        if set {
                            block_status = chosen;
                        }
                        reply(w, option, NBD_REP_ACK, &[]).await?;
                    }
                }
            }
            _ => {
                let msg = format!("option {} ({option}) is not supported", option_name(option));
                reply(w, option, NBD_REP_ERR_UNSUP, msg.as_bytes()).await?;
            }
        }
    }
    Err(ProtocolError::TooManyOptions(MAX_OPTIONS))
}

/// `NBD_OPT_EXPORT_NAME`: enter transmission or close (this option has no error reply).
async fn export_name<R, W>(
    r: &mut R,
    w: &mut W,
    export: &ExportInfo,
    len: u32,
    agreed: Negotiated,
    no_zeroes: bool,
) -> Result<Outcome, ProtocolError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    if len as usize > MAX_STRING_LEN {
        return Err(ProtocolError::TooLarge {
            what: "NBD_OPT_EXPORT_NAME name",
            len: len.into(),
        });
    }
    let mut name = vec![0u8; len as usize];
    r.read_exact(&mut name).await?;
    let name = String::from_utf8_lossy(&name).into_owned();
    if !export.matches(&name) {
        return Err(ProtocolError::UnknownExport(name));
    }
    w.write_all(&encode_export_name_reply(
        export.size,
        agreed.flags,
        no_zeroes,
    ))
    .await?;
    w.flush().await?;
    Ok(Outcome::Transmission(agreed))
}

/// `NBD_OPT_INFO` / `NBD_OPT_GO`. Returns whether the export was accepted (final `NBD_REP_ACK`).
async fn info_or_go<W: AsyncWrite + Unpin>(
    w: &mut W,
    option: u32,
    data: &[u8],
    export: &ExportInfo,
    structured: bool,
) -> Result<bool, ProtocolError> {
    let req = match parse_info_request(data) {
        Ok(req) => req,
        Err(msg) => {
            reply(w, option, NBD_REP_ERR_INVALID, msg.as_bytes()).await?;
            return Ok(false);
        }
    };
    if !export.matches(&req.name) {
        let msg = format!("unknown export {:?}", truncate_str(&req.name, 256));
        reply(w, option, NBD_REP_ERR_UNKNOWN, msg.as_bytes()).await?;
        return Ok(false);
    }
    let flags = transmission_flags(export.read_only, structured);
    let mut infos = Vec::new();
    if req.infos.contains(&NBD_INFO_NAME) {
        infos.push(encode_info_string(NBD_INFO_NAME, &export.name));
    }
    if req.infos.contains(&NBD_INFO_DESCRIPTION) && !export.description.is_empty() {
        infos.push(encode_info_string(
            NBD_INFO_DESCRIPTION,
            &export.description,
        ));
    }
    // Sent whether asked or not: we enforce 512-byte alignment, which is not the default.
    infos.push(encode_info_block_size(
        MIN_BLOCK_SIZE,
        PREFERRED_BLOCK_SIZE,
        MAX_PAYLOAD,
    ));
    infos.push(encode_info_export(export.size, flags));
    for info in infos {
        w.write_all(&encode_option_reply(option, NBD_REP_INFO, &info))
            .await?;
    }
    reply(w, option, NBD_REP_ACK, &[]).await?;
    Ok(true)
}

/// The parsed payload of `NBD_OPT_INFO` / `NBD_OPT_GO`.
#[derive(Debug, PartialEq, Eq)]
struct InfoRequest {
    name: String,
    infos: Vec<u16>,
}

/// Parses `name length, name, info count, infos`; the error is a message for the client.
fn parse_info_request(data: &[u8]) -> Result<InfoRequest, String> {
    if data.len() < 6 {
        return Err(format!("payload of {} bytes is shorter than 6", data.len()));
    }
    let name_len = be_u32(&data[0..4]) as usize;
    if name_len > data.len() - 6 {
        return Err(format!("name length {name_len} exceeds the payload"));
    }
    if name_len > MAX_STRING_LEN {
        return Err(format!("name length {name_len} exceeds {MAX_STRING_LEN}"));
    }
    let name = std::str::from_utf8(&data[4..4 + name_len])
        .map_err(|_| "export name is not UTF-8".to_string())?;
    let count_at = 4 + name_len;
    let count = usize::from(be_u16(&data[count_at..count_at + 2]));
    let infos_at = count_at + 2;
    if data.len() != infos_at + 2 * count {
        return Err(format!(
            "{count} info requests do not fill the remaining {} bytes",
            data.len() - infos_at
        ));
    }
    let infos = data[infos_at..]
        .chunks_exact(2)
        .map(be_u16)
        .collect::<Vec<_>>();
    Ok(InfoRequest {
        name: name.to_string(),
        infos,
    })
}

/// An `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT` request.
#[derive(Debug, PartialEq, Eq)]
struct MetaRequest {
    name: String,
    queries: Vec<String>,
}

impl MetaRequest {
    /// Whether the request names `base:allocation`: by its full name, or (listing only) by
    /// its namespace `base:` or by asking for every context (no query at all). A `SET` with no
    /// query selects nothing.
    fn selects_base_allocation(&self, set: bool) -> bool {
        if !set && self.queries.is_empty() {
            return true;
        }
        self.queries
            .iter()
            .any(|q| q == BASE_ALLOCATION || (!set && q == "base:"))
    }
}

/// Parses a metadata-context request: a 32-bit name length, the export name, a 32-bit query
/// count, then each query as a 32-bit length and a string. Every length is checked against
/// the payload and the spec's string limit, and the queries must fill the payload exactly.
fn parse_meta_request(data: &[u8]) -> Result<MetaRequest, String> {
    let mut at = 0usize;
    let name = take_string(data, &mut at, "export name")?;
    let count = take_u32(data, &mut at, "query count")?;
    let mut queries = Vec::new();
    for _ in 0..count {
        // Each query takes at least its 4-byte length: a count the payload cannot hold fails
        // here, before it can make this loop long.
        queries.push(take_string(data, &mut at, "query")?);
    }
    if at != data.len() {
        return Err(format!(
            "{} bytes after the {count} queries",
            data.len() - at
        ));
    }
    Ok(MetaRequest { name, queries })
}

/// The big-endian u32 at `*at` (the `what` of a message), moving `*at` past it.
fn take_u32(data: &[u8], at: &mut usize, what: &str) -> Result<u32, String> {
    let v = data
        .get(*at..*at + 4)
        .map(be_u32)
        .ok_or_else(|| format!("payload ends before the {what}"))?;
    *at += 4;
    Ok(v)
}

/// A string sent as a 32-bit length and UTF-8 bytes, at most the spec's string limit.
fn take_string(data: &[u8], at: &mut usize, what: &str) -> Result<String, String> {
    let len = take_u32(data, at, &format!("{what} length"))? as usize;
    if len > MAX_STRING_LEN {
        return Err(format!("{what} length {len} exceeds {MAX_STRING_LEN}"));
    }
    let bytes = data
        .get(*at..*at + len)
        .ok_or_else(|| format!("{what} length {len} exceeds the payload"))?;
    *at += len;
    String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
}

/// Sends one option reply and flushes (every option's final reply ends a round trip).
async fn reply<W: AsyncWrite + Unpin>(
    w: &mut W,
    option: u32,
    reply_type: u32,
    data: &[u8],
) -> Result<(), ProtocolError> {
    w.write_all(&encode_option_reply(option, reply_type, data))
        .await?;
    w.flush().await?;
    Ok(())
}

/// Reads and drops `len` bytes.
async fn discard<R: AsyncRead + Unpin>(r: &mut R, len: u64) -> Result<(), ProtocolError> {
    let copied = tokio::io::copy(&mut r.take(len), &mut tokio::io::sink()).await?;
    if copied != len {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info_payload(name: &str, infos: &[u16]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&(name.len() as u32).to_be_bytes());
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            b.extend_from_slice(&i.to_be_bytes());
        }
        b
    }

    #[test]
    fn parses_info_request() {
        let p = info_payload("disk", &[NBD_INFO_BLOCK_SIZE, NBD_INFO_NAME]);
        assert_eq!(
            parse_info_request(&p),
            Ok(InfoRequest {
                name: "disk".into(),
                infos: vec![NBD_INFO_BLOCK_SIZE, NBD_INFO_NAME]
            })
        );
    }

    #[test]
    fn rejects_malformed_info_requests() {
        assert!(parse_info_request(&[0, 0, 0]).is_err());
        // Name length pointing past the end.
        assert!(parse_info_request(&[0, 0, 0, 9, 0, 0]).is_err());
        // Count of infos that does not match the remaining bytes.
        let mut p = info_payload("x", &[1]);
        p.pop();
        assert!(parse_info_request(&p).is_err());
        // Huge name length does not overflow.
        assert!(parse_info_request(&[0xff, 0xff, 0xff, 0xff, 0, 0]).is_err());
    }

    fn meta_payload(name: &str, queries: &[&str]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&(name.len() as u32).to_be_bytes());
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for q in queries {
            b.extend_from_slice(&(q.len() as u32).to_be_bytes());
            b.extend_from_slice(q.as_bytes());
        }
        b
    }

    /// `base:allocation` is listed for no query, its namespace or its name, and set only by
    /// its name; other namespaces are not ours.
    #[test]
    fn meta_context_queries() {
        let req = |qs: &[&str]| parse_meta_request(&meta_payload("ftld", qs)).unwrap();
        assert_eq!(
            req(&["base:allocation", "qemu:dirty-bitmap:x"]),
            MetaRequest {
                name: "ftld".into(),
                queries: vec!["base:allocation".into(), "qemu:dirty-bitmap:x".into()]
            }
        );
        for (qs, list, set) in [
            (&[][..], true, false),
            (&["base:"][..], true, false),
            (&["base:allocation"][..], true, true),
            (
                &["qemu:allocation-depth", "base:allocation"][..],
                true,
                true,
            ),
            (&["qemu:allocation-depth"][..], false, false),
            (&["base:allocationx"][..], false, false),
        ] {
            let r = req(qs);
            assert_eq!(r.selects_base_allocation(false), list, "LIST {qs:?}");
            assert_eq!(r.selects_base_allocation(true), set, "SET {qs:?}");
        }
    }

    #[test]
    fn rejects_malformed_meta_requests() {
        let good = meta_payload("", &["base:allocation"]);
        assert!(parse_meta_request(&good).is_ok());
        // Every truncation fails; so does a trailing byte.
        for n in 0..good.len() {
            assert!(parse_meta_request(&good[..n]).is_err(), "{n} bytes");
        }
        let mut long = good.clone();
        long.push(0);
        assert!(parse_meta_request(&long).is_err());
        // A query count the payload cannot hold fails without looping 2^32 times.
        let mut many = meta_payload("", &[]);
        many[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_meta_request(&many).is_err());
        // A query over the string limit, and one that is not UTF-8.
        let big = "b".repeat(MAX_STRING_LEN + 1);
        assert!(parse_meta_request(&meta_payload("", &[&big])).is_err());
        let mut bad = meta_payload("", &["ab"]);
        let n = bad.len();
        bad[n - 1] = 0xff;
        assert!(parse_meta_request(&bad).is_err());
    }

    #[test]
    fn flags_follow_the_spec() {
        let rw = transmission_flags(false, false);
        assert_eq!(rw & NBD_FLAG_SEND_DF, 0);
        assert_ne!(rw & NBD_FLAG_SEND_FAST_ZERO, 0);
        let ro = transmission_flags(true, true);
        assert_ne!(ro & NBD_FLAG_READ_ONLY, 0);
        assert_ne!(ro & NBD_FLAG_SEND_DF, 0);
        assert_eq!(ro & (NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES), 0);
        // FAST_ZERO must be clear when WRITE_ZEROES is.
        assert_eq!(ro & NBD_FLAG_SEND_FAST_ZERO, 0);
    }
}
