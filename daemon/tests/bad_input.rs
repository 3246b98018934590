//! Hostile and broken NBD clients against the real `ftld serve`, over a raw unix socket: wrong
//! magic, unknown and oversized options, out-of-range and unknown requests, a WRITE whose payload
//! never comes, and a client that vanishes with requests in flight. Each case gets the
//! protocol's answer (an error reply or a closed connection), after which the daemon still
//! serves another connection, and nothing that was acknowledged and flushed is lost, neither
//! while it runs nor after `kill -9` and a restart.
//!
//! (`crates/nbd/tests/protocol.rs` covers the same ground in more detail against an in-memory
//! backend; these repeat the key cases with the FTL behind the server.)

use e2e::nbd::*;
use e2e::Daemon;

const FTLD: &str = env!("CARGO_BIN_EXE_ftld");

/// The daemon with a flushed baseline pattern that every test checks at its end.
struct Fixture {
    d: Daemon,
    size: u64,
}

/// Pattern byte `i` of the baseline block at `offset`.
fn baseline(offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((offset + i) as u8).wrapping_mul(7) ^ ((offset + i) >> 12) as u8 ^ 0xa5)
        .collect()
}

/// Offsets of the baseline: the first MiB, a piece in the middle and the last 64 KiB.
fn baseline_ranges(size: u64) -> [(u64, usize); 3] {
    [(0, 1 << 20), (size / 2, 40960), (size - 65536, 65536)]
}

impl Fixture {
    fn start() -> Fixture {
        let d = Daemon::start(FTLD);
        let mut c = Client::connect(&d.socket()).expect("connect");
        let size = c.size;
        assert_eq!(size, 64 << 20, "DaemonOpts::default() is 64 MiB");
        for (off, len) in baseline_ranges(size) {
            assert_eq!(c.write(off, &baseline(off, len)).expect("write"), 0);
        }
        c.flush().expect("flush");
        c.disconnect();
        Fixture { d, size }
    }

    /// A fresh connection does a write/flush/read roundtrip and the baseline reads back.
    fn check_serving(&mut self) {
        assert!(self.d.is_running(), "the daemon died:\n{}", self.d.log());
        let mut c = Client::connect(&self.d.socket()).expect("a new connection after bad input");
        let off = 8 << 20;
        let data = baseline(off ^ 0x1000, 8192);
        assert_eq!(c.write(off, &data).expect("write"), 0);
        c.flush().expect("flush");
        assert_eq!(c.read(off, 8192).expect("read"), data, "roundtrip");
        for (off, len) in baseline_ranges(self.size) {
            let got = c.read(off, len as u32).expect("read baseline");
            assert!(
                got == baseline(off, len),
                "flushed baseline at {off}+{len} changed"
            );
        }
        c.disconnect();
    }

    /// [`Fixture::check_serving`], then a power cut and restart, then the baseline again.
    fn finish(mut self) {
        self.check_serving();
        self.d.kill9();
        self.d.restart();
        self.check_serving();
        assert!(self.d.stop().success(), "{}", self.d.log());
    }
}

#[test]
fn wrong_magic_closes_only_that_connection() {
    let mut f = Fixture::start();
    // Wrong option magic during negotiation.
    let mut c = Client::negotiating(&f.d.socket()).expect("connect");
    c.send(&[0xde; 16]).expect("send");
    assert!(c.is_closed_by_server(), "wrong option magic must close");
    // Unknown client flags.
    let mut c = Client::raw(&f.d.socket()).expect("connect");
    c.send(&0x8000_0001u32.to_be_bytes()).expect("send");
    assert!(c.is_closed_by_server(), "unknown client flags must close");
    // Wrong request magic in transmission, while another connection is open.
    let mut bad = Client::connect(&f.d.socket()).expect("connect");
    let mut good = Client::connect(&f.d.socket()).expect("connect");
    bad.send(&[0x55; 28]).expect("send");
    assert!(bad.is_closed_by_server(), "wrong request magic must close");
    assert_eq!(good.read(0, 4096).expect("read"), baseline(0, 4096));
    good.disconnect();
    f.check_serving();
    f.finish();
}

#[test]
fn unknown_options_get_unsup_and_go_still_works() {
    let f = Fixture::start();
    let mut c = Client::negotiating(&f.d.socket()).expect("connect");
    // Unknown numbers and EXTENDED_HEADERS (11), which ftld does not do.
    for opt in [0x1234_5678, 11, 200] {
        c.send_option(opt, b"payload").expect("send");
        let (o, ty, msg) = c.option_reply().expect("reply");
        assert_eq!((o, ty), (opt, NBD_REP_ERR_UNSUP), "option {opt}");
        assert!(!msg.is_empty(), "error replies carry a message");
    }
    // LIST_META_CONTEXT (9) with a payload that is no request: invalid.
    c.send_option(9, b"payload").expect("send");
    assert_eq!(c.option_reply().expect("reply").1, NBD_REP_ERR_INVALID);
    // STARTTLS (5) on a daemon without --tls: refused by policy; with a payload: invalid.
    for (payload, expect) in [(&b""[..], NBD_REP_ERR_POLICY), (b"x", NBD_REP_ERR_INVALID)] {
        c.send_option(5, payload).expect("send");
        let (o, ty, _) = c.option_reply().expect("reply");
        assert_eq!((o, ty), (5, expect), "STARTTLS with {payload:?}");
    }
    // A malformed GO (name length beyond the payload) is invalid, and negotiation goes on.
    c.send_option(NBD_OPT_GO, &[0, 0, 1, 0, 0, 0])
        .expect("send");
    assert_eq!(c.option_reply().expect("reply").1, NBD_REP_ERR_INVALID);
    c.go().expect("GO after refused options");
    assert_eq!(c.read(0, 4096).expect("read"), baseline(0, 4096));
    c.disconnect();
    f.finish();
}

#[test]
fn oversized_options_are_refused_or_close() {
    let mut f = Fixture::start();
    let mut c = Client::negotiating(&f.d.socket()).expect("connect");
    c.send_option(NBD_OPT_GO, &vec![0u8; 100 << 10])
        .expect("send");
    assert_eq!(c.option_reply().expect("reply").1, NBD_REP_ERR_TOO_BIG);
    c.send_option(0x99, &vec![0u8; 9000]).expect("send");
    assert_eq!(c.option_reply().expect("reply").1, NBD_REP_ERR_TOO_BIG);
    c.go().expect("GO after oversized options");
    assert_eq!(c.read(0, 512).expect("read"), baseline(0, 512));
    c.disconnect();
    // A length nobody could mean (4 GiB) is not skipped: the connection closes.
    let mut c = Client::negotiating(&f.d.socket()).expect("connect");
    c.send_option_header(NBD_OPT_INFO, u32::MAX, &[0; 64])
        .expect("send");
    assert!(
        c.is_closed_by_server(),
        "an absurd option length must close"
    );
    f.check_serving();
    f.finish();
}

#[test]
fn out_of_range_misaligned_and_unknown_requests_get_the_spec_errno() {
    let f = Fixture::start();
    let mut c = Client::connect(&f.d.socket()).expect("connect");
    let end = c.size;
    let cases: &[(u16, u16, u64, u32, u32, &str)] = &[
        (NBD_CMD_READ, 0, end, 512, EINVAL, "read at the end"),
        (
            NBD_CMD_READ,
            0,
            end - 512,
            1024,
            EINVAL,
            "read across the end",
        ),
        (
            NBD_CMD_READ,
            0,
            u64::MAX - 511,
            1024,
            EINVAL,
            "read with wrapping offset",
        ),
        (NBD_CMD_READ, 0, 100, 512, EINVAL, "misaligned read"),
        (
            NBD_CMD_READ,
            0,
            0,
            (32 << 20) + 512,
            EINVAL,
            "read above max block size",
        ),
        (NBD_CMD_TRIM, 0, end, 4096, EINVAL, "trim past the end"),
        (
            NBD_CMD_WRITE_ZEROES,
            0,
            end - 512,
            1024,
            ENOSPC,
            "zeroes across the end",
        ),
        (NBD_CMD_FLUSH, 0, 512, 0, EINVAL, "flush with an offset"),
        (77, 0, 0, 512, EINVAL, "unknown command"),
        (NBD_CMD_READ, 1 << 12, 0, 512, EINVAL, "unknown flag"),
    ];
    for &(kind, flags, offset, len, errno, what) in cases {
        let r = c.call(kind, flags, offset, len, &[]).expect(what);
        assert_eq!(r.error, errno, "{what}");
        assert!(r.data.is_empty(), "{what}: an error reply carries no data");
    }
    // Refused writes still consume their payload: the next request parses fine, and the
    // refused data is nowhere.
    assert_eq!(c.write(end, &[1; 4096]).expect("write"), ENOSPC);
    assert_eq!(c.write(end - 4096, &[1; 8192]).expect("write"), ENOSPC);
    assert_eq!(c.write(3, &[1; 512]).expect("write"), EINVAL);
    assert_eq!(c.write(0, &[1; 700]).expect("write"), EINVAL);
    let big = vec![2u8; (32 << 20) + 4096];
    assert_eq!(c.write(0, &big).expect("write"), EINVAL);
    assert_eq!(c.read(0, 1 << 20).expect("read"), baseline(0, 1 << 20));
    let tail = end - 65536;
    assert_eq!(c.read(tail, 65536).expect("read"), baseline(tail, 65536));
    c.disconnect();
    let s = f.d.stats();
    assert!(
        s["nbd"]["errors"]["einval"].as_u64().unwrap_or(0) >= 10,
        "{:#}",
        s["nbd"]
    );
    f.finish();
}

#[test]
fn write_whose_payload_never_comes_is_not_applied() {
    let f = Fixture::start();
    let mut c = Client::connect(&f.d.socket()).expect("connect");
    // 1 MiB announced over the flushed baseline, 100 bytes sent, then the client leaves.
    c.request(NBD_CMD_WRITE, 0, 0, 1 << 20, &[7; 100])
        .expect("send");
    c.s.shutdown(std::net::Shutdown::Write).expect("shutdown");
    assert!(
        c.is_closed_by_server(),
        "the server closes a connection whose payload ends early"
    );
    drop(c);
    // Same with the socket simply dropped mid-payload.
    let mut c = Client::connect(&f.d.socket()).expect("connect");
    c.request(NBD_CMD_WRITE, 0, 4096, 65536, &[8; 30000])
        .expect("send");
    drop(c);
    f.finish();
}

#[test]
fn disconnect_with_requests_in_flight_loses_nothing_flushed() {
    let f = Fixture::start();
    let mut other = Client::connect(&f.d.socket()).expect("connect");
    for round in 0..3u8 {
        let mut c = Client::connect(&f.d.socket()).expect("connect");
        // Unflushed writes to a scratch area and reads of the baseline, replies never read.
        for i in 0..64u64 {
            let off = (16 << 20) + i * 65536;
            c.request(NBD_CMD_WRITE, 0, off, 65536, &vec![round; 65536])
                .expect("send");
            c.request(NBD_CMD_READ, 0, i * 4096, 4096, &[])
                .expect("send");
            if i % 16 == 0 {
                c.request(NBD_CMD_FLUSH, 0, 0, 0, &[]).expect("send");
                c.request(NBD_CMD_TRIM, 0, (20 << 20) + i * 4096, 4096, &[])
                    .expect("send");
            }
        }
        // Half a request header, then gone.
        c.send(&REQUEST_MAGIC.to_be_bytes()).expect("send");
        drop(c);
        // The other connection keeps working meanwhile.
        assert_eq!(other.read(0, 4096).expect("read"), baseline(0, 4096));
    }
    other.disconnect();
    // Scratch pages are each some round's whole 4 KiB page, never torn or foreign (every
    // write of a round carried its round's byte over whole pages).
    let mut c = Client::connect(&f.d.socket()).expect("connect");
    for i in 0..64u64 {
        let got = c.read((16 << 20) + i * 65536, 65536).expect("read");
        for page in got.chunks(4096) {
            let b = page[0];
            assert!(b < 3, "scratch page holds {b:#x}");
            assert!(page.iter().all(|&x| x == b), "torn page in round data");
        }
    }
    c.disconnect();
    f.finish();
}
