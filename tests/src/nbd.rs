//! A small blocking NBD client written from the protocol spec, for tests that need exact
//! control over the bytes on the wire (bad input) or many pipelined requests with known
//! ordering (crash tests). It knows nothing of the server's code: the constants are the spec's.
//!
//! [`Client::connect`] performs the fixed newstyle handshake with `NBD_OPT_GO` and simple
//! replies; [`Client::raw`] stops after the greeting for tests that send their own options.
//! Every read on the socket has a timeout ([`STEP`]), so a server that hangs fails the test
//! instead of hanging it.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Upper bound for a single wait on the socket.
pub const STEP: Duration = Duration::from_secs(30);

pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

pub const NBD_FLAG_FIXED_NEWSTYLE: u16 = 1;
pub const NBD_FLAG_NO_ZEROES: u16 = 2;
pub const NBD_FLAG_C_FIXED_NEWSTYLE: u32 = 1;
pub const NBD_FLAG_C_NO_ZEROES: u32 = 2;

pub const NBD_OPT_EXPORT_NAME: u32 = 1;
pub const NBD_OPT_ABORT: u32 = 2;
pub const NBD_OPT_LIST: u32 = 3;
pub const NBD_OPT_INFO: u32 = 6;
pub const NBD_OPT_GO: u32 = 7;

pub const NBD_REP_ACK: u32 = 1;
pub const NBD_REP_INFO: u32 = 3;
pub const NBD_REP_ERR_UNSUP: u32 = (1 << 31) | 1;
pub const NBD_REP_ERR_POLICY: u32 = (1 << 31) | 2;
pub const NBD_REP_ERR_INVALID: u32 = (1 << 31) | 3;
pub const NBD_REP_ERR_TOO_BIG: u32 = (1 << 31) | 9;
pub const NBD_INFO_EXPORT: u16 = 0;

pub const NBD_CMD_READ: u16 = 0;
pub const NBD_CMD_WRITE: u16 = 1;
pub const NBD_CMD_DISC: u16 = 2;
pub const NBD_CMD_FLUSH: u16 = 3;
pub const NBD_CMD_TRIM: u16 = 4;
pub const NBD_CMD_WRITE_ZEROES: u16 = 6;
pub const NBD_CMD_FLAG_FUA: u16 = 1;

pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;

/// One reply in the transmission phase (simple replies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub cookie: u64,
    /// 0 on success, else the errno the server sent.
    pub error: u32,
    /// Data of a successful READ.
    pub data: Vec<u8>,
}

/// A blocking NBD client on a unix socket.
pub struct Client {
    pub s: UnixStream,
    /// Export size (after GO).
    pub size: u64,
    /// Transmission flags (after GO).
    pub flags: u16,
    pending_reads: HashMap<u64, usize>,
    next_cookie: u64,
}

impl Client {
    /// Connects and reads the greeting (NBDMAGIC, IHAVEOPT, handshake flags); sends nothing.
    pub fn raw(socket: &Path) -> io::Result<Client> {
        let s = UnixStream::connect(socket)?;
        s.set_read_timeout(Some(STEP))?;
        s.set_write_timeout(Some(STEP))?;
        let mut c = Client {
            s,
            size: 0,
            flags: 0,
            pending_reads: HashMap::new(),
            next_cookie: 1,
        };
        let magic = c.u64()?;
        let opt = c.u64()?;
        let flags = c.u16()?;
        if magic != NBD_MAGIC || opt != IHAVEOPT {
            return Err(io::Error::other(format!(
                "bad greeting {magic:#x} {opt:#x}"
            )));
        }
        if flags & NBD_FLAG_FIXED_NEWSTYLE == 0 {
            return Err(io::Error::other("server is not fixed newstyle"));
        }
        Ok(c)
    }

    /// [`Client::raw`] plus the client flags FIXED_NEWSTYLE | NO_ZEROES.
    pub fn negotiating(socket: &Path) -> io::Result<Client> {
        let mut c = Client::raw(socket)?;
        c.send(&(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES).to_be_bytes())?;
        Ok(c)
    }

    /// A client in the transmission phase: handshake, then `NBD_OPT_GO` on the default export.
    pub fn connect(socket: &Path) -> io::Result<Client> {
        let mut c = Client::negotiating(socket)?;
        c.go()?;
        Ok(c)
    }

    /// Sends `NBD_OPT_GO` for the default export and reads the replies up to the ACK.
    pub fn go(&mut self) -> io::Result<()> {
        // name length 0, no info requests
        self.send_option(NBD_OPT_GO, &[0, 0, 0, 0, 0, 0])?;
        loop {
            let (opt, ty, data) = self.option_reply()?;
            if opt != NBD_OPT_GO {
                return Err(io::Error::other(format!("reply to option {opt}, not GO")));
            }
            match ty {
                NBD_REP_INFO => {
                    if data.len() == 12 && u16::from_be_bytes([data[0], data[1]]) == NBD_INFO_EXPORT
                    {
                        self.size = u64::from_be_bytes(data[2..10].try_into().expect("8 bytes"));
                        self.flags = u16::from_be_bytes([data[10], data[11]]);
                    }
                }
                NBD_REP_ACK => return Ok(()),
                other => {
                    return Err(io::Error::other(format!(
                        "GO refused with {other:#x}: {}",
                        String::from_utf8_lossy(&data)
                    )))
                }
            }
        }
    }

    /// Sends bytes as they are.
    pub fn send(&mut self, b: &[u8]) -> io::Result<()> {
        self.s.write_all(b)
    }

    fn read_exact(&mut self, n: usize) -> io::Result<Vec<u8>> {
        let mut b = vec![0; n];
        self.s.read_exact(&mut b)?;
        Ok(b)
    }

    fn u16(&mut self) -> io::Result<u16> {
        let mut b = [0; 2];
        self.s.read_exact(&mut b)?;
        Ok(u16::from_be_bytes(b))
    }

    fn u32(&mut self) -> io::Result<u32> {
        let mut b = [0; 4];
        self.s.read_exact(&mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    fn u64(&mut self) -> io::Result<u64> {
        let mut b = [0; 8];
        self.s.read_exact(&mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    /// Sends an option header claiming `len` bytes of payload, followed by `data`.
    pub fn send_option_header(&mut self, opt: u32, len: u32, data: &[u8]) -> io::Result<()> {
        let mut b = IHAVEOPT.to_be_bytes().to_vec();
        b.extend_from_slice(&opt.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(data);
        self.send(&b)
    }

    /// Sends option `opt` with payload `data`.
    pub fn send_option(&mut self, opt: u32, data: &[u8]) -> io::Result<()> {
        let len = u32::try_from(data.len()).expect("option payload fits u32");
        self.send_option_header(opt, len, data)
    }

    /// Reads one option reply: (option, reply type, data).
    pub fn option_reply(&mut self) -> io::Result<(u32, u32, Vec<u8>)> {
        let magic = self.u64()?;
        if magic != OPTION_REPLY_MAGIC {
            return Err(io::Error::other(format!("option reply magic {magic:#x}")));
        }
        let opt = self.u32()?;
        let ty = self.u32()?;
        let len = self.u32()? as usize;
        let data = self.read_exact(len)?;
        Ok((opt, ty, data))
    }

    /// Sends a request (with `payload` for writes, which may be shorter than `length` to
    /// simulate a client that stops sending); returns its cookie.
    pub fn request(
        &mut self,
        kind: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> io::Result<u64> {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        let mut b = Vec::with_capacity(28 + payload.len());
        b.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b.extend_from_slice(&flags.to_be_bytes());
        b.extend_from_slice(&kind.to_be_bytes());
        b.extend_from_slice(&cookie.to_be_bytes());
        b.extend_from_slice(&offset.to_be_bytes());
        b.extend_from_slice(&length.to_be_bytes());
        b.extend_from_slice(payload);
        if kind == NBD_CMD_READ {
            self.pending_reads.insert(cookie, length as usize);
        }
        self.send(&b)?;
        Ok(cookie)
    }

    /// Reads the next reply (any cookie).
    pub fn reply(&mut self) -> io::Result<Reply> {
        let magic = self.u32()?;
        if magic != SIMPLE_REPLY_MAGIC {
            return Err(io::Error::other(format!("reply magic {magic:#x}")));
        }
        let error = self.u32()?;
        let cookie = self.u64()?;
        let data = match self.pending_reads.remove(&cookie) {
            Some(n) if error == 0 => self.read_exact(n)?,
            _ => Vec::new(),
        };
        Ok(Reply {
            cookie,
            error,
            data,
        })
    }

    /// A request and its reply, nothing else in flight.
    pub fn call(
        &mut self,
        kind: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> io::Result<Reply> {
        let cookie = self.request(kind, flags, offset, length, payload)?;
        let r = self.reply()?;
        if r.cookie != cookie {
            return Err(io::Error::other(format!(
                "reply cookie {} for request {cookie}",
                r.cookie
            )));
        }
        Ok(r)
    }

    /// WRITE; returns the errno (0 on success).
    pub fn write(&mut self, offset: u64, data: &[u8]) -> io::Result<u32> {
        let len = u32::try_from(data.len()).expect("write fits u32");
        Ok(self.call(NBD_CMD_WRITE, 0, offset, len, data)?.error)
    }

    /// READ; fails unless the server answers without error.
    pub fn read(&mut self, offset: u64, len: u32) -> io::Result<Vec<u8>> {
        let r = self.call(NBD_CMD_READ, 0, offset, len, &[])?;
        if r.error != 0 {
            return Err(io::Error::other(format!(
                "READ {offset}+{len} failed with errno {}",
                r.error
            )));
        }
        Ok(r.data)
    }

    /// FLUSH; fails unless the server answers without error.
    pub fn flush(&mut self) -> io::Result<()> {
        let r = self.call(NBD_CMD_FLUSH, 0, 0, 0, &[])?;
        if r.error != 0 {
            return Err(io::Error::other(format!(
                "FLUSH failed with errno {}",
                r.error
            )));
        }
        Ok(())
    }

    /// Sends `NBD_CMD_DISC` (no reply) and shuts the socket down.
    pub fn disconnect(mut self) {
        let _ = self.request(NBD_CMD_DISC, 0, 0, 0, &[]);
        let _ = self.s.shutdown(std::net::Shutdown::Both);
    }

    /// Whether the server closed the connection: EOF or reset, with nothing more sent. A
    /// timeout ([`STEP`]) or unexpected data means it did not.
    pub fn is_closed_by_server(&mut self) -> bool {
        let mut b = [0u8; 1];
        match self.s.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
        }
    }
}
