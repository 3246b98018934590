//! A blocking NBD client: connects to any NBD server by URI (ours, nbdkit, qemu-nbd,
//! nbd-server), negotiates an export, and sends requests from many threads at once over one
//! connection (pipelined; replies matched by cookie). `ftld replay --target` drives exports
//! with it.
//!
//! URIs (the NBD URI spec's subset without TLS): `nbd://HOST[:PORT][/EXPORT]` (port 10809 by
//! default) and `nbd+unix:///[EXPORT]?socket=PATH`. The handshake is fixed newstyle with
//! `NO_ZEROES`, `NBD_OPT_GO` (falling back to `NBD_OPT_EXPORT_NAME` when the server does not
//! know GO) and simple replies. Reads and writes longer than the 32 MiB a server must accept
//! are split.
//!
//! **Threads.** Requests are written under [`Client`]'s writer lock (a whole request at a time,
//! so requests from different threads never interleave on the wire); one reader thread reads
//! replies and hands each to the caller waiting on its cookie. If the connection breaks, every
//! waiting and later request fails with [`ClientError::Disconnected`].

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use crate::protocol::*;

/// The default NBD TCP port.
pub const DEFAULT_PORT: u16 = 10809;

/// Why a connection or a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{uri:?} is not an NBD URI: {why}")]
    BadUri { uri: String, why: String },
    #[error("connecting to {target}: {source}")]
    Connect { target: String, source: io::Error },
    #[error("NBD handshake: {0}")]
    Handshake(String),
    #[error("the server refused export {export:?}: {reply} {message}")]
    Refused {
        export: String,
        reply: String,
        message: String,
    },
    #[error("NBD connection: {0}")]
    Io(#[from] io::Error),
    #[error(
        "the server answered {op} at offset {offset} length {len} with error {errno} ({name})"
    )]
    Errno {
        op: &'static str,
        offset: u64,
        len: u64,
        errno: u32,
        name: &'static str,
    },
    #[error("the export does not support {0}")]
    Unsupported(&'static str),
    #[error("{op} at offset {offset} length {len} is past the export's end ({size})")]
    OutOfRange {
        op: &'static str,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error("the NBD connection is closed: {0}")]
    Disconnected(String),
}

impl ClientError {
    /// The request failed but the connection is usable (the server answered with an error).
    pub fn is_request_error(&self) -> bool {
        matches!(self, ClientError::Errno { .. })
    }
}

/// Where a server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NbdAddress {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

/// A parsed NBD URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUri {
    pub address: NbdAddress,
    pub export: String,
}

impl std::fmt::Display for NbdUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.address {
            NbdAddress::Tcp { host, port } => write!(f, "nbd://{host}:{port}/{}", self.export),
            NbdAddress::Unix(p) => write!(f, "nbd+unix:///{}?socket={}", self.export, p.display()),
        }
    }
}

/// Undoes `%XX` escapes.
fn unescape(s: &str, uri: &str) -> Result<String, ClientError> {
    let bad = |why: &str| ClientError::BadUri {
        uri: uri.into(),
        why: why.into(),
    };
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .ok_or_else(|| bad("a cut-off % escape"))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad("a bad % escape"))?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad("an escape that is not UTF-8"))
}

impl std::str::FromStr for NbdUri {
    type Err = ClientError;

    fn from_str(uri: &str) -> Result<NbdUri, ClientError> {
        let bad = |why: &str| ClientError::BadUri {
            uri: uri.into(),
            why: why.into(),
        };
        let (scheme, rest) = uri.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let export = unescape(path, uri)?;
        let params: Vec<(&str, &str)> = query
            .map(|q| {
                q.split('&')
                    .filter(|p| !p.is_empty())
                    .map(|p| p.split_once('=').unwrap_or((p, "")))
                    .collect()
            })
            .unwrap_or_default();
        match scheme {
            "nbd" => {
                if let Some((k, _)) = params.first() {
                    return Err(bad(&format!("unknown query parameter {k:?}")));
                }
                if authority.is_empty() {
                    return Err(bad("no host"));
                }
                let (host, port) = if let Some(h) = authority.strip_prefix('[') {
                    // [v6]:port
                    let (h, p) = h
                        .split_once(']')
                        .ok_or_else(|| bad("an unclosed [ in the host"))?;
                    (h.to_string(), p.strip_prefix(':'))
                } else {
                    match authority.rsplit_once(':') {
                        Some((h, p)) => (h.to_string(), Some(p)),
                        None => (authority.to_string(), None),
                    }
                };
                let port = match port {
                    Some(p) => p.parse().map_err(|_| bad(&format!("port {p:?}")))?,
                    None => DEFAULT_PORT,
                };
                Ok(NbdUri {
                    address: NbdAddress::Tcp { host, port },
                    export,
                })
            }
            "nbd+unix" => {
                if !authority.is_empty() {
                    return Err(bad(
                        "nbd+unix takes no host (nbd+unix:///EXPORT?socket=PATH)",
                    ));
                }
                let mut socket = None;
                for (k, v) in params {
                    match k {
                        "socket" => socket = Some(PathBuf::from(unescape(v, uri)?)),
                        _ => return Err(bad(&format!("unknown query parameter {k:?}"))),
                    }
                }
                let socket = socket.ok_or_else(|| bad("no ?socket=PATH"))?;
                Ok(NbdUri {
                    address: NbdAddress::Unix(socket),
                    export,
                })
            }
            "nbds" | "nbds+unix" => Err(bad("TLS is not supported by this client")),
            other => Err(bad(&format!("unknown scheme {other:?} (nbd or nbd+unix)"))),
        }
    }
}

/// Either socket kind.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

fn read_u16(s: &mut impl Read) -> io::Result<u16> {
    let mut b = [0; 2];
    s.read_exact(&mut b)?;
    Ok(u16::from_be_bytes(b))
}

fn read_u32(s: &mut impl Read) -> io::Result<u32> {
    let mut b = [0; 4];
    s.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

fn read_u64(s: &mut impl Read) -> io::Result<u64> {
    let mut b = [0; 8];
    s.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

/// The spec's name of an error code.
fn errno_name(e: u32) -> &'static str {
    match e {
        1 => "EPERM",
        5 => "EIO",
        12 => "ENOMEM",
        22 => "EINVAL",
        28 => "ENOSPC",
        75 => "EOVERFLOW",
        95 => "ENOTSUP",
        108 => "ESHUTDOWN",
        _ => "unknown",
    }
}

fn rep_name(r: u32) -> String {
    match r {
        NBD_REP_ERR_UNSUP => "NBD_REP_ERR_UNSUP".into(),
        NBD_REP_ERR_POLICY => "NBD_REP_ERR_POLICY".into(),
        NBD_REP_ERR_INVALID => "NBD_REP_ERR_INVALID".into(),
        NBD_REP_ERR_PLATFORM => "NBD_REP_ERR_PLATFORM".into(),
        NBD_REP_ERR_TLS_REQD => "NBD_REP_ERR_TLS_REQD (the server requires TLS)".into(),
        NBD_REP_ERR_UNKNOWN => "NBD_REP_ERR_UNKNOWN (no such export)".into(),
        NBD_REP_ERR_SHUTDOWN => "NBD_REP_ERR_SHUTDOWN".into(),
        NBD_REP_ERR_BLOCK_SIZE_REQD => "NBD_REP_ERR_BLOCK_SIZE_REQD".into(),
        NBD_REP_ERR_TOO_BIG => "NBD_REP_ERR_TOO_BIG".into(),
        other => format!("reply {other:#x}"),
    }
}

/// A reply handed to the waiting caller: the data of a read, or the error code.
type Outcome = Result<Vec<u8>, u32>;

struct Pending {
    /// Bytes of data that follow a successful reply (reads).
    read_len: usize,
    tx: SyncSender<Outcome>,
}

/// Requests in flight, and whether more may be sent.
#[derive(Default)]
struct Inflight {
    /// Requests sent and not yet answered, by cookie.
    pending: HashMap<u64, Pending>,
    /// Why the connection broke, once it has. Kept under the same lock as `pending` so no
    /// request is registered after the reader gave up (it would wait forever).
    broken: Option<String>,
}

/// State shared with the reader thread.
struct Shared {
    inflight: Mutex<Inflight>,
    closing: AtomicBool,
}

impl Shared {
    fn fail_all(&self, why: String) {
        let mut i = self.inflight.lock();
        i.broken.get_or_insert(why);
        // Dropping the senders wakes every waiter with a disconnect.
        i.pending.clear();
    }

    fn broken(&self) -> String {
        self.inflight
            .lock()
            .broken
            .clone()
            .unwrap_or_else(|| "closed".into())
    }
}

/// A connection to one export, usable from many threads.
pub struct Client {
    /// Lock order: `writer`, then `Shared::inflight` (a request is registered before its
    /// header is sent, so the reader always finds it).
    writer: Mutex<Stream>,
    shared: Arc<Shared>,
    reader: Option<JoinHandle<()>>,
    next_cookie: AtomicU64,
    size: u64,
    flags: u16,
    uri: NbdUri,
}

impl Client {
    /// Connects to `uri` and negotiates its export.
    pub fn connect(uri: &NbdUri) -> Result<Client, ClientError> {
        let mut s = match &uri.address {
            NbdAddress::Tcp { host, port } => {
                let t = TcpStream::connect((host.as_str(), *port)).map_err(|source| {
                    ClientError::Connect {
                        target: format!("{host}:{port}"),
                        source,
                    }
                })?;
                t.set_nodelay(true)?;
                Stream::Tcp(t)
            }
            NbdAddress::Unix(p) => {
                Stream::Unix(
                    UnixStream::connect(p).map_err(|source| ClientError::Connect {
                        target: p.display().to_string(),
                        source,
                    })?,
                )
            }
        };
        let (size, flags) = handshake(&mut s, &uri.export)?;
        let reader_stream = s.try_clone()?;
        let shared = Arc::new(Shared {
            inflight: Mutex::new(Inflight::default()),
            closing: AtomicBool::new(false),
        });
        let sh = shared.clone();
        let reader = std::thread::Builder::new()
            .name("nbd-client-reader".into())
            .spawn(move || read_replies(reader_stream, &sh))?;
        Ok(Client {
            writer: Mutex::new(s),
            shared,
            reader: Some(reader),
            next_cookie: AtomicU64::new(1),
            size,
            flags,
            uri: uri.clone(),
        })
    }

    /// The export's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The transmission flags the server sent (`NBD_FLAG_*`).
    pub fn flags(&self) -> u16 {
        self.flags
    }

    /// The URI connected to.
    pub fn uri(&self) -> &NbdUri {
        &self.uri
    }

    fn check_range(&self, op: &'static str, offset: u64, len: u64) -> Result<(), ClientError> {
        if offset.checked_add(len).is_none_or(|e| e > self.size) {
            return Err(ClientError::OutOfRange {
                op,
                offset,
                len,
                size: self.size,
            });
        }
        Ok(())
    }

    /// Sends one request and waits for its reply.
    fn request(
        &self,
        kind: u16,
        flags: u16,
        offset: u64,
        len: u32,
        payload: &[u8],
        read_len: usize,
    ) -> Result<Vec<u8>, ClientError> {
        let cookie = self.next_cookie.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        let header = RequestHeader {
            magic: REQUEST_MAGIC,
            flags,
            kind,
            cookie,
            offset,
            length: len,
        }
        .encode();
        {
            let mut w = self.writer.lock();
            {
                let mut i = self.shared.inflight.lock();
                if let Some(why) = &i.broken {
                    return Err(ClientError::Disconnected(why.clone()));
                }
                i.pending.insert(cookie, Pending { read_len, tx });
            }
            let sent = w.write_all(&header).and_then(|()| w.write_all(payload));
            if let Err(e) = sent {
                // Half a request may be on the wire: the stream is out of step for good.
                w.shutdown();
                self.shared.fail_all(format!("sending a request: {e}"));
                return Err(ClientError::Io(e));
            }
        }
        let op = command_name(kind);
        match rx.recv() {
            Ok(Ok(data)) => Ok(data),
            Ok(Err(errno)) => Err(ClientError::Errno {
                op,
                offset,
                len: u64::from(len),
                errno,
                name: errno_name(errno),
            }),
            Err(_) => Err(ClientError::Disconnected(self.shared.broken())),
        }
    }

    /// Reads `buf.len()` bytes at `offset`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ClientError> {
        self.check_range("READ", offset, buf.len() as u64)?;
        let mut off = offset;
        for chunk in buf.chunks_mut(MAX_PAYLOAD as usize) {
            let n = chunk.len();
            let data = self.request(NBD_CMD_READ, 0, off, n as u32, &[], n)?;
            chunk.copy_from_slice(&data);
            off += n as u64;
        }
        Ok(())
    }

    /// Writes `data` at `offset`; with `fua`, durable when this returns.
    pub fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ClientError> {
        self.check_range("WRITE", offset, data.len() as u64)?;
        if self.flags & NBD_FLAG_READ_ONLY != 0 {
            return Err(ClientError::Unsupported("writes (it is read-only)"));
        }
        let flags = if fua { self.fua_flag()? } else { 0 };
        let mut off = offset;
        for chunk in data.chunks(MAX_PAYLOAD as usize) {
            self.request(NBD_CMD_WRITE, flags, off, chunk.len() as u32, chunk, 0)?;
            off += chunk.len() as u64;
        }
        Ok(())
    }

    fn fua_flag(&self) -> Result<u16, ClientError> {
        if self.flags & NBD_FLAG_SEND_FUA == 0 {
            return Err(ClientError::Unsupported("FUA"));
        }
        Ok(NBD_CMD_FLAG_FUA)
    }

    /// Makes every completed write durable.
    pub fn flush(&self) -> Result<(), ClientError> {
        if self.flags & NBD_FLAG_SEND_FLUSH == 0 {
            return Err(ClientError::Unsupported("FLUSH"));
        }
        self.request(NBD_CMD_FLUSH, 0, 0, 0, &[], 0).map(drop)
    }

    /// Discards `len` bytes at `offset` (in pieces of at most 4 GiB - 4 KiB, as the length
    /// field is 32 bits).
    pub fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<(), ClientError> {
        self.check_range("TRIM", offset, len)?;
        if self.flags & NBD_FLAG_SEND_TRIM == 0 {
            return Err(ClientError::Unsupported("TRIM"));
        }
        let flags = if fua { self.fua_flag()? } else { 0 };
        const PIECE: u64 = (u32::MAX as u64) & !4095;
        let (mut off, end) = (offset, offset + len);
        while off < end {
            let n = (end - off).min(PIECE);
            self.request(NBD_CMD_TRIM, flags, off, n as u32, &[], 0)?;
            off += n;
        }
        Ok(())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Release);
        {
            let mut w = self.writer.lock();
            let disc = RequestHeader {
                magic: REQUEST_MAGIC,
                flags: 0,
                kind: NBD_CMD_DISC,
                cookie: 0,
                offset: 0,
                length: 0,
            }
            .encode();
            let _ = w.write_all(&disc);
            w.shutdown();
        }
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// The reader thread: one reply at a time, to the caller waiting on its cookie.
fn read_replies(mut s: Stream, shared: &Shared) {
    let why = loop {
        let mut head = [0u8; 16];
        if let Err(e) = s.read_exact(&mut head) {
            break if shared.closing.load(Ordering::Acquire) {
                "closed by the client".to_string()
            } else {
                format!("reading a reply: {e}")
            };
        }
        let magic = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let error = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
        let cookie = u64::from_be_bytes(head[8..16].try_into().unwrap_or([0; 8]));
        if magic != SIMPLE_REPLY_MAGIC {
            break format!("a reply with magic {magic:#x} (simple replies were negotiated)");
        }
        let Some(p) = shared.inflight.lock().pending.remove(&cookie) else {
            break format!("a reply to cookie {cookie}, which was not sent or already answered");
        };
        let outcome = if error != 0 {
            Err(error)
        } else {
            let mut data = vec![0; p.read_len];
            if let Err(e) = s.read_exact(&mut data) {
                break format!("reading {} bytes of read data: {e}", p.read_len);
            }
            Ok(data)
        };
        let _ = p.tx.send(outcome);
    };
    s.shutdown();
    shared.fail_all(why);
}

/// The fixed newstyle handshake up to the transmission phase: (export size, transmission
/// flags).
fn handshake(s: &mut Stream, export: &str) -> Result<(u64, u16), ClientError> {
    let hs = |m: String| ClientError::Handshake(m);
    let magic = read_u64(s)?;
    if magic != NBD_MAGIC {
        return Err(hs(format!("greeting magic {magic:#x}, not NBDMAGIC")));
    }
    let style = read_u64(s)?;
    if style != IHAVEOPT {
        return Err(hs(format!(
            "{style:#x} after NBDMAGIC: an oldstyle server, which is not supported"
        )));
    }
    let hflags = read_u16(s)?;
    if hflags & NBD_FLAG_FIXED_NEWSTYLE == 0 {
        return Err(hs("the server is not fixed newstyle".into()));
    }
    let no_zeroes = hflags & NBD_FLAG_NO_ZEROES != 0;
    let mut cflags = NBD_FLAG_C_FIXED_NEWSTYLE;
    if no_zeroes {
        cflags |= NBD_FLAG_C_NO_ZEROES;
    }
    s.write_all(&cflags.to_be_bytes())?;
    let name = export.as_bytes();
    let name_len = u32::try_from(name.len())
        .ok()
        .filter(|&n| n as usize <= MAX_STRING_LEN)
        .ok_or_else(|| hs(format!("export name of {} bytes is too long", name.len())))?;
    // NBD_OPT_GO: name, then no information requests (the server sends NBD_INFO_EXPORT anyway).
    let mut payload = Vec::with_capacity(name.len() + 6);
    payload.extend_from_slice(&name_len.to_be_bytes());
    payload.extend_from_slice(name);
    payload.extend_from_slice(&0u16.to_be_bytes());
    let mut opt = IHAVEOPT.to_be_bytes().to_vec();
    opt.extend_from_slice(&NBD_OPT_GO.to_be_bytes());
    opt.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    opt.extend_from_slice(&payload);
    s.write_all(&opt)?;
    let mut export_info = None;
    loop {
        let magic = read_u64(s)?;
        if magic != OPTION_REPLY_MAGIC {
            return Err(hs(format!("option reply magic {magic:#x}")));
        }
        let option = read_u32(s)?;
        let reply = read_u32(s)?;
        let len = read_u32(s)? as usize;
        if len > 64 << 10 {
            return Err(hs(format!("an option reply of {len} bytes")));
        }
        let mut data = vec![0; len];
        s.read_exact(&mut data)?;
        if option != NBD_OPT_GO {
            return Err(hs(format!("a reply to option {option}, not GO")));
        }
        match reply {
            NBD_REP_ACK => break,
            NBD_REP_INFO
                if data.len() >= 12
                    && u16::from_be_bytes([data[0], data[1]]) == NBD_INFO_EXPORT =>
            {
                let size = u64::from_be_bytes(data[2..10].try_into().unwrap_or([0; 8]));
                let flags = u16::from_be_bytes([data[10], data[11]]);
                export_info = Some((size, flags));
            }
            NBD_REP_ERR_UNSUP => {
                // A server without GO: NBD_OPT_EXPORT_NAME ends the haggling with the export's
                // size and flags (and 124 zero bytes unless NO_ZEROES was agreed).
                let mut opt = IHAVEOPT.to_be_bytes().to_vec();
                opt.extend_from_slice(&NBD_OPT_EXPORT_NAME.to_be_bytes());
                opt.extend_from_slice(&name_len.to_be_bytes());
                opt.extend_from_slice(name);
                s.write_all(&opt)?;
                let size = read_u64(s)?;
                let flags = read_u16(s)?;
                if !no_zeroes {
                    let mut z = [0u8; 124];
                    s.read_exact(&mut z)?;
                }
                return Ok((size, flags));
            }
            r if r & NBD_REP_FLAG_ERROR != 0 => {
                return Err(ClientError::Refused {
                    export: export.into(),
                    reply: rep_name(r),
                    message: String::from_utf8_lossy(&data).into_owned(),
                })
            }
            // Other information (name, description, block size): not needed.
            _ => {}
        }
    }
    export_info.ok_or_else(|| hs("GO was acknowledged without NBD_INFO_EXPORT".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse() {
        let u: NbdUri = "nbd://localhost".parse().unwrap();
        assert_eq!(
            u.address,
            NbdAddress::Tcp {
                host: "localhost".into(),
                port: DEFAULT_PORT
            }
        );
        assert_eq!(u.export, "");
        let u: NbdUri = "nbd://10.0.0.1:1234/my%20disk".parse().unwrap();
        assert_eq!(
            u.address,
            NbdAddress::Tcp {
                host: "10.0.0.1".into(),
                port: 1234
            }
        );
        assert_eq!(u.export, "my disk");
        let u: NbdUri = "nbd://[::1]:99/x".parse().unwrap();
        assert_eq!(
            u.address,
            NbdAddress::Tcp {
                host: "::1".into(),
                port: 99
            }
        );
        let u: NbdUri = "nbd+unix:///e?socket=/run/ftld/nbd.sock".parse().unwrap();
        assert_eq!(u.address, NbdAddress::Unix("/run/ftld/nbd.sock".into()));
        assert_eq!(u.export, "e");
        for bad in [
            "localhost",
            "http://x",
            "nbd://",
            "nbd://h:port",
            "nbd+unix:///",
            "nbd+unix://host/?socket=/s",
            "nbd+unix:///?socket=/s&tls=1",
            "nbds://h",
            "nbd://h/%4",
        ] {
            let e = bad.parse::<NbdUri>().unwrap_err();
            assert!(matches!(e, ClientError::BadUri { .. }), "{bad}: {e}");
        }
    }
}
