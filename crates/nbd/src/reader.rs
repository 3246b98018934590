//! The transmission phase's read side: request headers through a buffer, large `WRITE`
//! payloads straight from the socket into the request's own buffer.
//!
//! A buffered reader batches small requests (one `recv` brings in dozens of 4 KiB requests at
//! high queue depth), but everything it brings in is copied a second time, from its buffer into
//! the payload. For a 128 KiB write that second copy costs as much as the kernel's own. So:
//! - a payload's part already in the buffer is copied out; a remainder of at least
//!   [`DIRECT_READ_MIN`] bytes is read from the socket into the payload itself;
//! - after any payload of that size (its tail, if under [`DIRECT_READ_MIN`], is filled only up
//!   to its end) the next fill reads only one request header, so the next large write's
//!   payload is not pulled into the buffer either (a client streaming large writes costs one
//!   short `recv` per request instead of a copy of every byte); any other request lets the
//!   fills after it use the whole buffer again.

use tokio::io::{AsyncRead, AsyncReadExt, BufReader};

use crate::protocol::REQUEST_HEADER_LEN;

/// A payload remainder this long is read directly into the payload (below it, a copy costs
/// less than the extra `recv`).
pub const DIRECT_READ_MIN: usize = 32 << 10;

/// Buffered request reader over a connection's read half (see the module docs).
pub struct RequestReader<R> {
    inner: R,
    buf: Box<[u8]>,
    /// Unread bytes are `buf[pos..end]`.
    pos: usize,
    end: usize,
    /// How many bytes the next fill may read (the buffer's size, or one header after a
    /// payload read directly).
    next_fill: usize,
    /// `recv`-level reads so far, and payload bytes read directly (tests check the policy).
    #[cfg_attr(not(test), allow(dead_code))]
    reads: u64,
    #[cfg_attr(not(test), allow(dead_code))]
    direct_bytes: u64,
}

impl<R: AsyncRead + Unpin> RequestReader<R> {
    /// Takes over a handshake's buffered reader, with whatever it has buffered already.
    pub fn from_buf_reader(r: BufReader<R>, capacity: usize) -> RequestReader<R> {
        let pending = r.buffer().to_vec();
        let capacity = capacity.max(pending.len()).max(REQUEST_HEADER_LEN);
        let mut buf = vec![0u8; capacity].into_boxed_slice();
        buf[..pending.len()].copy_from_slice(&pending);
        RequestReader {
            inner: r.into_inner(),
            buf,
            pos: 0,
            end: pending.len(),
            next_fill: capacity,
            reads: 0,
            direct_bytes: 0,
        }
    }

    /// The buffered bytes, reading more first if there are none. Empty at end of stream.
    /// Cancel-safe: a fill that does not complete consumes nothing.
    pub async fn fill(&mut self) -> std::io::Result<&[u8]> {
        if self.pos == self.end {
            let limit =
                std::mem::replace(&mut self.next_fill, self.buf.len()).clamp(1, self.buf.len());
            let n = self.inner.read(&mut self.buf[..limit]).await?;
            self.reads += 1;
            self.pos = 0;
            self.end = n;
        }
        Ok(&self.buf[self.pos..self.end])
    }

    /// How many bytes are buffered (read from the socket, not yet consumed).
    pub fn buffered(&self) -> usize {
        self.end - self.pos
    }

    /// Copies buffered bytes into `out`; returns how many.
    fn take_buffered(&mut self, out: &mut [u8]) -> usize {
        let n = out.len().min(self.end - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        n
    }

    /// Fills `out` exactly.
    pub async fn read_exact(&mut self, out: &mut [u8]) -> std::io::Result<()> {
        let mut done = 0;
        while done < out.len() {
            if self.fill().await?.is_empty() {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            done += self.take_buffered(&mut out[done..]);
        }
        Ok(())
    }

    /// Appends a `len`-byte payload to `out` (its spare capacity is used without zero-filling).
    pub async fn read_payload(&mut self, out: &mut Vec<u8>, len: usize) -> std::io::Result<()> {
        let target = out.len() + len;
        let large = len >= DIRECT_READ_MIN;
        let n = len.min(self.end - self.pos);
        out.extend_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        // Past here the buffer is empty whenever bytes are missing: reading past it keeps the
        // byte order.
        while out.len() < target {
            let rem = target - out.len();
            if rem >= DIRECT_READ_MIN {
                let got = (&mut self.inner).take(rem as u64).read_buf(out).await?;
                self.reads += 1;
                if got == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                self.direct_bytes += got as u64;
                continue;
            }
            if large {
                // The tail of a large payload: do not pull the next request in behind it.
                self.next_fill = rem;
            }
            if self.fill().await?.is_empty() {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let n = rem.min(self.end - self.pos);
            out.extend_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
        }
        if large {
            self.next_fill = REQUEST_HEADER_LEN;
        }
        Ok(())
    }

    /// Reads and drops `len` bytes (a refused write's payload).
    pub async fn skip(&mut self, mut len: u64) -> std::io::Result<()> {
        while len > 0 {
            let avail = self.fill().await?.len();
            if avail == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let n = avail.min(usize::try_from(len).unwrap_or(usize::MAX));
            self.pos += n;
            len -= n as u64;
        }
        Ok(())
    }

    /// Drops what is buffered, or else reads once and drops that; returns how many bytes
    /// (0: the peer ended its side). Cancel-safe: a read that does not complete consumes
    /// nothing. For the lingering close after shutdown (`connection`).
    pub async fn discard_some(&mut self) -> std::io::Result<usize> {
        self.next_fill = self.buf.len();
        let n = self.fill().await?.len();
        self.pos += n;
        Ok(n)
    }

    /// `recv`-level reads so far and payload bytes that skipped the buffer.
    #[cfg(test)]
    pub fn read_counts(&self) -> (u64, u64) {
        (self.reads, self.direct_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A request stream: (header bytes, payload length) pairs, headers tagged by index.
    fn stream(payloads: &[usize]) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut bytes = Vec::new();
        let mut bodies = Vec::new();
        for (i, &len) in payloads.iter().enumerate() {
            bytes.extend_from_slice(&[i as u8; REQUEST_HEADER_LEN]);
            let body: Vec<u8> = (0..len).map(|j| (j * 7 + i) as u8).collect();
            bytes.extend_from_slice(&body);
            bodies.push(body);
        }
        (bytes, bodies)
    }

    async fn read_all(bytes: Vec<u8>, bodies: &[Vec<u8>], chunk: usize) -> (u64, u64) {
        let (client, server) = tokio::io::duplex(1 << 20);
        let writer = tokio::spawn(async move {
            let mut client = client;
            for c in bytes.chunks(chunk) {
                client.write_all(c).await.unwrap();
            }
            client.shutdown().await.unwrap();
            client
        });
        let mut r = RequestReader::from_buf_reader(BufReader::new(server), 128 << 10);
        for (i, body) in bodies.iter().enumerate() {
            assert!(!r.fill().await.unwrap().is_empty());
            let mut h = [0u8; REQUEST_HEADER_LEN];
            r.read_exact(&mut h).await.unwrap();
            assert_eq!(h, [i as u8; REQUEST_HEADER_LEN], "header {i}");
            let mut out = Vec::with_capacity(body.len());
            r.read_payload(&mut out, body.len()).await.unwrap();
            assert!(out == *body, "payload {i} differs");
        }
        assert!(r.fill().await.unwrap().is_empty(), "stream not at its end");
        drop(writer.await.unwrap());
        r.read_counts()
    }

    #[tokio::test]
    async fn mixed_payloads_keep_their_order_and_bytes() {
        let sizes = [
            0,
            4096,
            128 << 10,
            0,
            512,
            1 << 20,
            4096,
            32 << 10,
            128 << 10,
            0,
            33,
        ];
        let (bytes, bodies) = stream(&sizes);
        for chunk in [1 << 20, 65536, 4096 + 28, 1000, 7] {
            read_all(bytes.clone(), &bodies, chunk).await;
        }
    }

    #[tokio::test]
    async fn large_payloads_skip_the_buffer() {
        let sizes = [128 << 10; 16];
        let (bytes, bodies) = stream(&sizes);
        let total: usize = sizes.iter().sum();
        let (_, direct) = read_all(bytes, &bodies, 1 << 20).await;
        // The first payload may be buffered (the first fill reads as much as it can); after
        // it, each fill brings in one header only. A direct read that returns short leaves a
        // tail under DIRECT_READ_MIN, which is copied.
        let want = (total - (128 << 10)) as u64;
        assert!(
            direct * 100 >= want * 99,
            "only {direct} of {total} payload bytes skipped the buffer"
        );
    }

    #[tokio::test]
    async fn small_payloads_are_batched() {
        let sizes = [4096; 64];
        let (bytes, bodies) = stream(&sizes);
        let (reads, direct) = read_all(bytes, &bodies, 1 << 20).await;
        assert_eq!(direct, 0);
        // 64 requests of 4 KiB + header fit in three 128 KiB fills (and the end-of-stream read).
        assert!(reads <= 4, "{reads} reads for 64 small requests");
    }

    #[tokio::test]
    async fn a_truncated_payload_is_an_eof_error() {
        let (bytes, _) = stream(&[64 << 10]);
        let (mut client, server) = tokio::io::duplex(1 << 20);
        client.write_all(&bytes[..bytes.len() - 10]).await.unwrap();
        drop(client);
        let mut r = RequestReader::from_buf_reader(BufReader::new(server), 128 << 10);
        let mut h = [0u8; REQUEST_HEADER_LEN];
        r.read_exact(&mut h).await.unwrap();
        let mut out = Vec::new();
        let e = r.read_payload(&mut out, 64 << 10).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }

    #[tokio::test]
    async fn bytes_buffered_by_the_handshake_are_kept() {
        let (bytes, bodies) = stream(&[4096, 100 << 10]);
        let (mut client, server) = tokio::io::duplex(1 << 20);
        client.write_all(&bytes).await.unwrap();
        drop(client);
        let mut br = BufReader::new(server);
        use tokio::io::AsyncBufReadExt;
        br.fill_buf().await.unwrap();
        let mut r = RequestReader::from_buf_reader(br, 128 << 10);
        for (i, body) in bodies.iter().enumerate() {
            let mut h = [0u8; REQUEST_HEADER_LEN];
            r.read_exact(&mut h).await.unwrap();
            assert_eq!(h[0], i as u8);
            let mut out = Vec::new();
            r.read_payload(&mut out, body.len()).await.unwrap();
            assert!(out == *body);
        }
    }
}
