//! The checkpoint payload format, encoded and decoded as a stream: a checkpoint of a large
//! device is written from the map and read into the map a piece at a time, so neither side
//! ever holds the encoded bytes or a second copy of the map (issue 14: peak RAM at open).
//!
//! Layout (little-endian): header `magic "FTLDCKPT", version u32, kind u32 (0 full, 1 delta),
//! id u64, sc u64, prev_sc u64, lpns u32, blocks u32, trims u32, chunks u32, crc32 of the body
//! u32, body length u32`, zero-padded to 64 bytes, then the body: the map (full: `lpns` x u32;
//! delta: per chunk `index u32` and its entries), per block `(erase_count u32,
//! programmed_pages u32)`, then the live trim-log slots `(psa u32, seq u64)`, then (version 2
//! only) the scheme's own state as u32 words to the body's end (RFTL: jobs under way; the
//! scheme validates it against the medium before using any of it). A checkpoint without
//! scheme state is written as version 1, which every earlier build reads. The header's CRC
//! covers the body, so an encoder makes two passes over the body (one for the CRC, one for the
//! bytes); a decoder checks it at the end, so what it stored before must be discarded on
//! failure (the loader clears the map).

use crate::layout::Psa;

use super::CHUNK;

const MAGIC: &[u8; 8] = b"FTLDCKPT";
const VERSION: u32 = 1;
/// A body that ends with the scheme's state.
const VERSION_SCHEME_STATE: u32 = 2;
pub(crate) const HEADER: usize = 64;

/// A map a checkpoint is read from: a copy, or the live table while it is held still.
pub(crate) trait MapSource: Sync {
    fn entries(&self) -> usize;
    /// Copies entries `start..start + out.len()` into `out`.
    fn read(&self, start: usize, out: &mut [u32]);
}

impl MapSource for Vec<u32> {
    fn entries(&self) -> usize {
        self.len()
    }
    fn read(&self, start: usize, out: &mut [u32]) {
        out.copy_from_slice(&self[start..start + out.len()]);
    }
}

/// Where a loaded checkpoint's map goes: the scheme's live table, filled in place.
pub(crate) trait MapSink: Sync {
    fn entries(&self) -> usize;
    /// Sets entries `start..start + v.len()`.
    fn store(&self, start: usize, v: &[u32]);
    /// Every entry unmapped (a checkpoint that failed half way is forgotten).
    fn clear(&self) {
        let unmapped = [Psa::UNMAPPED; CHUNK as usize];
        let n = self.entries();
        let mut at = 0;
        while at < n {
            let k = (n - at).min(unmapped.len());
            self.store(at, &unmapped[..k]);
            at += k;
        }
    }
}

/// The map part of a checkpoint being written.
pub(crate) enum MapBody<'a> {
    /// Every entry.
    Full(&'a dyn MapSource),
    /// Only the chunks (of `CHUNK` entries) changed since the previous checkpoint.
    Delta(&'a [(u32, Vec<u32>)]),
}

/// A checkpoint being written.
pub(crate) struct Outgoing<'a> {
    pub id: u64,
    pub sc: u64,
    pub prev_sc: u64,
    pub lpns: u32,
    pub map: MapBody<'a>,
    pub blocks: &'a [(u32, u32)],
    pub trims: &'a [(Psa, u64)],
    /// The scheme's own state (`Scheme::checkpoint_state`), often empty.
    pub scheme_state: &'a [u32],
}

impl Outgoing<'_> {
    fn body_len(&self) -> usize {
        let map = match &self.map {
            MapBody::Full(m) => m.entries() * 4,
            MapBody::Delta(c) => c.iter().map(|(_, e)| 4 + e.len() * 4).sum(),
        };
        map + self.blocks.len() * 8 + self.trims.len() * 12 + self.scheme_state.len() * 4
    }

    /// Bytes of the whole encoding (header and body).
    pub fn encoded_len(&self) -> usize {
        HEADER + self.body_len()
    }

    /// Emits the body in pieces.
    fn body(&self, out: &mut dyn FnMut(&[u8])) {
        let mut buf = [0u8; 4 * CHUNK as usize];
        let mut words = |v: &[u32], out: &mut dyn FnMut(&[u8])| {
            for part in v.chunks(CHUNK as usize) {
                for (d, w) in buf.chunks_exact_mut(4).zip(part) {
                    d.copy_from_slice(&w.to_le_bytes());
                }
                out(&buf[..part.len() * 4]);
            }
        };
        match &self.map {
            MapBody::Full(m) => {
                let mut piece = [0u32; CHUNK as usize];
                let n = m.entries();
                let mut at = 0;
                while at < n {
                    let k = (n - at).min(piece.len());
                    m.read(at, &mut piece[..k]);
                    words(&piece[..k], out);
                    at += k;
                }
            }
            MapBody::Delta(chunks) => {
                for (c, entries) in chunks.iter() {
                    out(&c.to_le_bytes());
                    words(entries, out);
                }
            }
        }
        for (e, p) in self.blocks {
            out(&e.to_le_bytes());
            out(&p.to_le_bytes());
        }
        for (psa, seq) in self.trims {
            out(&psa.0.to_le_bytes());
            out(&seq.to_le_bytes());
        }
        words(self.scheme_state, out);
    }

    /// Emits the whole encoding in pieces: the body is walked twice (its CRC goes first, in
    /// the header), so a map read from the live table must be held still for the whole call.
    pub fn encode(&self, out: &mut dyn FnMut(&[u8])) {
        let mut crc = crc32fast::Hasher::new();
        self.body(&mut |b| crc.update(b));
        let (kind, chunks) = match &self.map {
            MapBody::Full(_) => (0u32, 0u32),
            MapBody::Delta(c) => (1, c.len() as u32),
        };
        let mut h = [0u8; HEADER];
        h[0..8].copy_from_slice(MAGIC);
        let version = if self.scheme_state.is_empty() {
            VERSION
        } else {
            VERSION_SCHEME_STATE
        };
        let fields32 = [
            (8, version),
            (12, kind),
            (40, self.lpns),
            (44, self.blocks.len() as u32),
            (48, self.trims.len() as u32),
            (52, chunks),
            (56, crc.finalize()),
            (60, self.body_len() as u32),
        ];
        for (o, v) in fields32 {
            h[o..o + 4].copy_from_slice(&v.to_le_bytes());
        }
        for (o, v) in [(16, self.id), (24, self.sc), (32, self.prev_sc)] {
            h[o..o + 8].copy_from_slice(&v.to_le_bytes());
        }
        out(&h);
        self.body(out);
    }
}

/// A decoded checkpoint header, its counts checked against its body length.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    pub full: bool,
    /// Version 2: the body ends with the scheme's state.
    scheme_state: bool,
    pub id: u64,
    pub sc: u64,
    pub prev_sc: u64,
    pub lpns: u32,
    blocks: usize,
    trims: usize,
    chunks: usize,
    crc: u32,
    pub len: usize,
}

fn get32(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn get64(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

impl Header {
    /// Decodes and checks the first `HEADER` bytes of a checkpoint. Counts are bounded by the
    /// body length before anything is sized by them (a hostile count with a valid CRC must not
    /// allocate: found by the `checkpoint` fuzz target).
    pub fn decode(b: &[u8]) -> Result<Header, String> {
        if b.len() < HEADER || &b[0..8] != MAGIC {
            return Err("bad checkpoint magic".into());
        }
        let h = |o| get32(b, o).ok_or("short header");
        let version = h(8)?;
        if version != VERSION && version != VERSION_SCHEME_STATE {
            return Err("unsupported checkpoint version".into());
        }
        let scheme_state = version == VERSION_SCHEME_STATE;
        let kind = h(12)?;
        if kind > 1 {
            return Err(format!("unknown checkpoint kind {kind}"));
        }
        let id = get64(b, 16).ok_or("short header")?;
        let sc = get64(b, 24).ok_or("short header")?;
        let prev_sc = get64(b, 32).ok_or("short header")?;
        if sc >= 1 << 62 || prev_sc > sc {
            return Err(format!(
                "checkpoint sequence numbers out of range (sc {sc}, prev_sc {prev_sc})"
            ));
        }
        // One id per checkpoint written: 2^62 is never reached, and the next id (`id + 1`)
        // must not wrap to 0 and lose to this one as "newest" at every later open. (Recovery
        // opens a device read-only long before: at 2^61.)
        if id >= 1 << 62 {
            return Err(format!("checkpoint id {id} out of range"));
        }
        let (lpns, blocks, trims, chunks, crc, len) = (
            h(40)?,
            h(44)? as usize,
            h(48)? as usize,
            h(52)? as usize,
            h(56)?,
            h(60)? as usize,
        );
        // What the counts say the body holds besides the delta chunks' entries and the
        // scheme's state: a full checkpoint's body without that state is exactly that, any
        // other at least that.
        let fixed = (if kind == 0 { lpns as usize } else { chunks })
            .checked_mul(4)
            .zip(blocks.checked_mul(8))
            .zip(trims.checked_mul(12))
            .and_then(|((m, b), t)| m.checked_add(b)?.checked_add(t));
        let counts_ok = match fixed {
            Some(n) if kind == 0 && !scheme_state => n == len,
            Some(n) => n <= len,
            None => false,
        };
        if !counts_ok || len % 4 != 0 {
            return Err(format!(
                "checkpoint counts exceed its {len}-byte body (lpns {lpns}, chunks {chunks}, \
                 blocks {blocks}, trims {trims})"
            ));
        }
        Ok(Header {
            full: kind == 0,
            scheme_state,
            id,
            sc,
            prev_sc,
            lpns,
            blocks,
            trims,
            chunks,
            crc,
            len,
        })
    }
}

/// The body bytes, as they come: a checkpoint's pages, in order.
pub(crate) trait BodySource {
    /// The next piece (a page), or an error saying why it is missing or corrupt.
    fn next_piece(&mut self) -> Result<Vec<u8>, String>;
}

/// Reads a body's words across its pieces, hashing what it consumes.
struct Words<'a> {
    src: &'a mut dyn BodySource,
    cur: Vec<u8>,
    pos: usize,
    /// Body bytes not yet taken from the source.
    left: usize,
    crc: crc32fast::Hasher,
}

impl Words<'_> {
    fn refill(&mut self) -> Result<(), String> {
        while self.pos >= self.cur.len() {
            if self.left == 0 {
                return Err("checkpoint body too short".into());
            }
            let mut p = self.src.next_piece()?;
            if p.is_empty() {
                return Err("checkpoint body too short".into());
            }
            p.truncate(self.left);
            self.left -= p.len();
            self.crc.update(&p);
            self.cur = p;
            self.pos = 0;
        }
        Ok(())
    }

    fn word(&mut self) -> Result<u32, String> {
        let mut b = [0u8; 4];
        for x in &mut b {
            self.refill()?;
            *x = self.cur[self.pos];
            self.pos += 1;
        }
        Ok(u32::from_le_bytes(b))
    }

    fn words(&mut self, out: &mut [u32]) -> Result<(), String> {
        let mut i = 0;
        while i < out.len() {
            self.refill()?;
            let avail = (self.cur.len() - self.pos) / 4;
            if avail == 0 {
                out[i] = self.word()?;
                i += 1;
                continue;
            }
            let k = avail.min(out.len() - i);
            for (o, b) in out[i..i + k]
                .iter_mut()
                .zip(self.cur[self.pos..self.pos + 4 * k].chunks_exact(4))
            {
                *o = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            self.pos += 4 * k;
            i += k;
        }
        Ok(())
    }

    /// Body bytes not read yet.
    fn remaining(&self) -> usize {
        self.left + self.cur.len().saturating_sub(self.pos)
    }

    /// Takes the rest of the body (bytes past what the counts describe are covered by the CRC
    /// too) and checks the CRC.
    fn finish(mut self, want: u32) -> Result<(), String> {
        while self.left > 0 {
            self.pos = self.cur.len();
            self.refill()?;
        }
        if self.crc.finalize() != want {
            return Err("checkpoint payload checksum mismatch".into());
        }
        Ok(())
    }
}

/// What to do with the map of a checkpoint being decoded.
pub(crate) enum MapOut<'a> {
    /// Store it into the live table.
    Sink(&'a dyn MapSink),
    /// Check it only.
    Skip,
    /// Keep it (tests and the fuzz target).
    #[allow(dead_code)]
    Keep,
}

/// The map of a decoded checkpoint, when kept.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum MapImage {
    Full(Vec<u32>),
    Delta(Vec<(u32, Vec<u32>)>),
}

/// What recovery uses of a checkpoint besides its map.
#[derive(Clone, Debug, Default)]
pub struct Checkpoint {
    pub id: u64,
    pub sc: u64,
    pub prev_sc: u64,
    pub lpns: u32,
    /// Per global block: (erase count, programmed pages) at the checkpoint.
    pub blocks: Vec<(u32, u32)>,
    pub trims: Vec<(Psa, u64)>,
    /// The scheme's own state as the checkpoint was taken (empty but for RFTL; unchecked:
    /// the scheme validates it against the medium before using it).
    pub scheme_state: Vec<u32>,
}

/// Entries in map chunk `c` of a `lpns`-entry map (the last chunk may be short).
pub(super) fn chunk_len(c: u32, lpns: u32) -> Option<u32> {
    let start = c.checked_mul(CHUNK)?;
    (start < lpns).then(|| (lpns - start).min(CHUNK))
}

/// Decodes a body after its header (`rest`: the bytes of the header's piece after the header),
/// sending the map where `map` says. On an error, whatever was stored is garbage.
pub(crate) fn decode_body(
    h: &Header,
    rest: Vec<u8>,
    src: &mut dyn BodySource,
    map: MapOut<'_>,
) -> Result<(Checkpoint, Option<MapImage>), String> {
    let mut first = rest;
    first.truncate(h.len);
    let mut w = Words {
        left: h.len - first.len(),
        crc: crc32fast::Hasher::new(),
        src,
        cur: Vec::new(),
        pos: 0,
    };
    w.crc.update(&first);
    w.cur = first;
    if let MapOut::Sink(s) = &map {
        if s.entries() != h.lpns as usize {
            return Err(format!(
                "checkpoint maps {} pages, the device has {}",
                h.lpns,
                s.entries()
            ));
        }
    }
    let mut kept = None;
    let mut piece = vec![0u32; CHUNK as usize];
    if h.full {
        let mut full = match map {
            MapOut::Keep => Vec::with_capacity(h.lpns as usize),
            _ => Vec::new(),
        };
        let n = h.lpns as usize;
        let mut at = 0;
        while at < n {
            let k = (n - at).min(piece.len());
            w.words(&mut piece[..k])?;
            match &map {
                MapOut::Sink(s) => s.store(at, &piece[..k]),
                MapOut::Keep => full.extend_from_slice(&piece[..k]),
                MapOut::Skip => {}
            }
            at += k;
        }
        if matches!(map, MapOut::Keep) {
            kept = Some(MapImage::Full(full));
        }
    } else {
        let mut chunks = Vec::new();
        for _ in 0..h.chunks {
            let c = w.word()?;
            let n = chunk_len(c, h.lpns).ok_or("delta chunk out of range")? as usize;
            w.words(&mut piece[..n])?;
            match &map {
                MapOut::Sink(s) => s.store((c * CHUNK) as usize, &piece[..n]),
                MapOut::Keep => chunks.push((c, piece[..n].to_vec())),
                MapOut::Skip => {}
            }
        }
        if matches!(map, MapOut::Keep) {
            kept = Some(MapImage::Delta(chunks));
        }
    }
    let mut blocks = Vec::with_capacity(h.blocks);
    for _ in 0..h.blocks {
        blocks.push((w.word()?, w.word()?));
    }
    let mut trims = Vec::with_capacity(h.trims);
    for _ in 0..h.trims {
        let psa = Psa(w.word()?);
        let lo = w.word()? as u64;
        let hi = w.word()? as u64;
        trims.push((psa, lo | hi << 32));
    }
    // (Grown as words arrive: its length is bounded by the pages read, not by a count.)
    let mut scheme_state = Vec::new();
    while h.scheme_state && w.remaining() > 0 {
        scheme_state.push(w.word()?);
    }
    w.finish(h.crc)?;
    Ok((
        Checkpoint {
            id: h.id,
            sc: h.sc,
            prev_sc: h.prev_sc,
            lpns: h.lpns,
            blocks,
            trims,
            scheme_state,
        },
        kept,
    ))
}

/// Pieces of an in-memory encoding, `size` bytes each.
struct Slices<'a> {
    rest: &'a [u8],
    size: usize,
}

impl BodySource for Slices<'_> {
    fn next_piece(&mut self) -> Result<Vec<u8>, String> {
        if self.rest.is_empty() {
            return Err("checkpoint body too short".into());
        }
        let k = self.size.min(self.rest.len());
        let (a, b) = self.rest.split_at(k);
        self.rest = b;
        Ok(a.to_vec())
    }
}

/// Decodes a whole encoding held in memory, cut into pieces of `piece` bytes (the page size
/// when read from flash). Never panics on any input (fuzzed: `fuzz/`).
pub(crate) fn decode(b: &[u8], piece: usize) -> Result<(Checkpoint, MapImage), String> {
    let h = Header::decode(b)?;
    if h.len > b.len() - HEADER {
        return Err("checkpoint shorter than its header says".into());
    }
    let piece = piece.max(1);
    let first_end = piece.max(HEADER).min(b.len());
    let mut src = Slices {
        rest: &b[first_end..],
        size: piece,
    };
    let (c, m) = decode_body(&h, b[HEADER..first_end].to_vec(), &mut src, MapOut::Keep)?;
    Ok((c, m.ok_or("map not kept")?))
}

/// Encodes into one buffer (tests and the fuzz target's seeds).
#[cfg(test)]
pub(crate) fn encode(c: &Outgoing<'_>) -> Vec<u8> {
    let mut v = Vec::with_capacity(c.encoded_len());
    c.encode(&mut |b| v.extend_from_slice(b));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRIMS: [(Psa, u64); 2] = [(Psa(9), 77), (Psa(10), u32::MAX as u64 + 5)];

    fn sample(map: MapBody<'_>) -> Outgoing<'_> {
        Outgoing {
            id: 4,
            sc: 99,
            prev_sc: 50,
            lpns: 2 * CHUNK + 3,
            map,
            blocks: &[(1, 2), (3, 4), (5, 6)],
            trims: &TRIMS,
            scheme_state: &[],
        }
    }

    /// Full and delta checkpoints, with and without a scheme state, decode to what was
    /// encoded whatever the piece size, with words and trim records straddling pieces, and a
    /// changed byte anywhere in the body is caught. One without a scheme state is version 1
    /// (what earlier builds read).
    #[test]
    fn roundtrip_in_any_pieces() {
        let full: Vec<u32> = (0..2 * CHUNK + 3).map(|i| i * 7 + 1).collect();
        let chunks = vec![(0, vec![5; CHUNK as usize]), (2, vec![6, 7, 8])];
        let state = [0x5246_544c, 1, u32::MAX, 0];
        for (out, want) in [
            (sample(MapBody::Full(&full)), MapImage::Full(full.clone())),
            (
                sample(MapBody::Delta(&chunks)),
                MapImage::Delta(chunks.clone()),
            ),
            (
                Outgoing {
                    scheme_state: &state,
                    ..sample(MapBody::Full(&full))
                },
                MapImage::Full(full.clone()),
            ),
            (
                Outgoing {
                    scheme_state: &state,
                    ..sample(MapBody::Delta(&chunks))
                },
                MapImage::Delta(chunks.clone()),
            ),
        ] {
            let b = encode(&out);
            let version = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
            assert_eq!(version, if out.scheme_state.is_empty() { 1 } else { 2 });
            assert_eq!(b.len(), out.encoded_len());
            for piece in [1, 3, 5, 13, 64, 100, 4096, 1 << 20] {
                let (c, m) = decode(&b, piece).expect("decodes");
                assert_eq!((c.id, c.sc, c.prev_sc, c.lpns), (4, 99, 50, 2 * CHUNK + 3));
                assert_eq!(c.blocks, out.blocks);
                assert_eq!(c.trims, out.trims);
                assert_eq!(c.scheme_state, out.scheme_state);
                assert_eq!(m, want, "piece {piece}");
            }
            for at in [HEADER, HEADER + 1, b.len() / 2, b.len() - 1] {
                let mut bad = b.clone();
                bad[at] ^= 1;
                assert!(decode(&bad, 100).is_err(), "flip at {at} accepted");
            }
            assert!(
                decode(&b[..b.len() - 1], 100).is_err(),
                "short body accepted"
            );
        }
    }

    /// Counts in a checkpoint header that its body cannot hold are refused before anything is
    /// sized by them (the `checkpoint` fuzz target found a 64 GiB allocation here), and a
    /// delta chunk past the map's end is refused.
    #[test]
    fn counts_and_chunks_are_bounded() {
        let chunks = vec![(0, vec![1, 2, 3, 4, 5, 6, 7, 8])];
        let out = Outgoing {
            id: 1,
            sc: 10,
            prev_sc: 5,
            lpns: 8,
            map: MapBody::Delta(&chunks),
            blocks: &[(1, 2)],
            trims: &[(Psa(3), 4)],
            scheme_state: &[],
        };
        let good = encode(&out);
        assert!(decode(&good, 4096).is_ok());
        for (offset, value) in [
            (52, u32::MAX),
            (44, u32::MAX),
            (48, 1 << 30),
            (40, u32::MAX),
        ] {
            let mut bad = good.clone();
            bad[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
            assert!(
                decode(&bad, 4096).is_err(),
                "field at {offset} = {value} accepted"
            );
        }
        let past = vec![(1, vec![1; 4])];
        let bad = Outgoing {
            map: MapBody::Delta(&past),
            ..out
        };
        assert!(decode(&encode(&bad), 4096).is_err());
        // An id whose successor would wrap.
        let bad = Outgoing {
            id: u64::MAX,
            ..out
        };
        let e = decode(&encode(&bad), 4096).err().unwrap_or_default();
        assert!(e.contains("checkpoint id"), "{e}");
    }

    /// A version 1 full checkpoint is exactly what its counts say: a trailing word is
    /// refused, as every earlier build refused it. Version 2 takes trailing words as the
    /// scheme's state, whole words only.
    #[test]
    fn trailing_words_are_scheme_state_only_in_version_2() {
        let full: Vec<u32> = vec![1; 8];
        let out = Outgoing {
            id: 1,
            sc: 10,
            prev_sc: 5,
            lpns: 8,
            map: MapBody::Full(&full),
            blocks: &[(1, 2)],
            trims: &[],
            scheme_state: &[],
        };
        // Appends `extra` to the body, fixing the length and CRC in the header.
        let with_tail = |b: &[u8], extra: &[u8], version: u32| {
            let mut v = b.to_vec();
            v.extend_from_slice(extra);
            let len = (v.len() - HEADER) as u32;
            let crc = crc32fast::hash(&v[HEADER..]);
            v[8..12].copy_from_slice(&version.to_le_bytes());
            v[56..60].copy_from_slice(&crc.to_le_bytes());
            v[60..64].copy_from_slice(&len.to_le_bytes());
            v
        };
        let b = encode(&out);
        assert!(decode(&with_tail(&b, &[], 1), 4096).is_ok());
        assert!(decode(&with_tail(&b, &7u32.to_le_bytes(), 1), 4096).is_err());
        let (c, _) = decode(&with_tail(&b, &7u32.to_le_bytes(), 2), 4096).expect("version 2");
        assert_eq!(c.scheme_state, vec![7]);
        let (c, _) = decode(&with_tail(&b, &[], 2), 4096).expect("version 2, no state");
        assert!(c.scheme_state.is_empty());
        assert!(decode(&with_tail(&b, &[1, 2], 2), 4096).is_err());
        assert!(decode(&with_tail(&b, &[], 3), 4096).is_err());
    }
}
