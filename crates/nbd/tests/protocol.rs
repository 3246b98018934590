//! Raw-socket protocol tests: a hand-written client against a real server on a temporary unix
//! socket (and one TCP test), covering the handshake, every command, replies in both formats,
//! out-of-order completion, the spec's error codes and hostile or vanishing clients.

mod common;

use common::*;
use ftl_nbd::protocol::*;
use ftl_nbd::{BackendError, MemBackend, NbdServer, ServerConfig, TlsPolicy};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

const SIZE: usize = 4 << 20;
const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;
const EPERM: u32 = 1;
const EIO: u32 = 5;

fn mem_server() -> TestServer<MemBackend> {
    TestServer::start(MemBackend::new(SIZE), config())
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

// ------------------------------------------------------------------------------------------
// Handshake
// ------------------------------------------------------------------------------------------

#[tokio::test]
async fn opt_list_names_the_export() {
    let srv = mem_server();
    let mut c = srv.connect().await;
    c.start().await;
    c.send_option(NBD_OPT_LIST, &[]).await;
    let (opt, ty, data) = c.option_reply().await;
    assert_eq!((opt, ty), (NBD_OPT_LIST, NBD_REP_SERVER));
    let name_len = u32::from_be_bytes(data[..4].try_into().unwrap()) as usize;
    assert_eq!(&data[4..4 + name_len], EXPORT.as_bytes());
    assert_eq!(&data[4 + name_len..], DESCRIPTION.as_bytes());
    let (_, ty, _) = c.option_reply().await;
    assert_eq!(ty, NBD_REP_ACK);
    // LIST must not carry data.
    let (ty, _) = c.option(NBD_OPT_LIST, b"x").await;
    assert_eq!(ty, NBD_REP_ERR_INVALID);
    let (ty, _) = c.option(NBD_OPT_STRUCTURED_REPLY, b"x").await;
    assert_eq!(ty, NBD_REP_ERR_INVALID);
    let (ty, _) = c.option(NBD_OPT_ABORT, &[]).await;
    assert_eq!(ty, NBD_REP_ACK);
    c.expect_closed().await;
}

#[tokio::test]
async fn opt_info_then_go_with_block_sizes() {
    let srv = mem_server();
    let mut c = srv.connect().await;
    c.start().await;
    let wanted = [
        NBD_INFO_BLOCK_SIZE,
        NBD_INFO_NAME,
        NBD_INFO_DESCRIPTION,
        999,
    ];
    let info = c.info_or_go(NBD_OPT_INFO, "", &wanted).await;
    assert_eq!(info.result, NBD_REP_ACK);
    assert_eq!(info.block_size, Some((512, 4096, 32 << 20)));
    assert_eq!(info.name.as_deref(), Some(EXPORT));
    assert_eq!(info.description.as_deref(), Some(DESCRIPTION));
    let (size, flags) = info.export.expect("export info");
    assert_eq!(size, SIZE as u64);
    let expected = NBD_FLAG_HAS_FLAGS
        | NBD_FLAG_SEND_FLUSH
        | NBD_FLAG_SEND_FUA
        | NBD_FLAG_SEND_TRIM
        | NBD_FLAG_SEND_WRITE_ZEROES
        | NBD_FLAG_SEND_FAST_ZERO
        | NBD_FLAG_SEND_CACHE
        | NBD_FLAG_CAN_MULTI_CONN;
    assert_eq!(flags, expected, "no DF without structured replies");

    // Still negotiating: GO by the canonical name, with structured replies.
    let (ty, _) = c.option(NBD_OPT_STRUCTURED_REPLY, &[]).await;
    assert_eq!(ty, NBD_REP_ACK);
    c.structured = true;
    let go = c
        .info_or_go(NBD_OPT_GO, EXPORT, &[NBD_INFO_BLOCK_SIZE])
        .await;
    assert_eq!(go.result, NBD_REP_ACK);
    assert_eq!(go.export, Some((SIZE as u64, expected | NBD_FLAG_SEND_DF)));
    assert!(go.block_size.is_some());
    let r = c.write(0, &[1; 512], 0).await;
    assert_eq!(r.error, 0);
}

#[tokio::test]
async fn unknown_export_is_refused_and_negotiation_continues() {
    let srv = mem_server();
    let mut c = srv.connect().await;
    c.start().await;
    let r = c.info_or_go(NBD_OPT_GO, "nope", &[]).await;
    assert_eq!(r.result, NBD_REP_ERR_UNKNOWN);
    assert!(r.export.is_none());
    let r = c.info_or_go(NBD_OPT_INFO, "nope", &[]).await;
    assert_eq!(r.result, NBD_REP_ERR_UNKNOWN);
    // Malformed GO: name length beyond the payload.
    let (ty, _) = c.option(NBD_OPT_GO, &[0, 0, 1, 0, 0, 0]).await;
    assert_eq!(ty, NBD_REP_ERR_INVALID);
    let r = c.info_or_go(NBD_OPT_GO, "", &[]).await;
    assert_eq!(r.result, NBD_REP_ACK);
    assert_eq!(c.read(0, 512).await.error, 0);
}

#[tokio::test]
async fn unknown_options_get_unsup_then_go_works() {
    let srv = mem_server();
    let mut c = srv.connect().await;
    c.start().await;
    for opt in [0x1234_5678, NBD_OPT_EXTENDED_HEADERS] {
        let (ty, msg) = c.option(opt, b"some payload").await;
        assert_eq!(ty, NBD_REP_ERR_UNSUP, "option {opt}");
        assert!(!msg.is_empty(), "error replies carry a message");
    }
    let r = c.info_or_go(NBD_OPT_GO, EXPORT, &[]).await;
    assert_eq!(r.result, NBD_REP_ACK);
    assert_eq!(c.read(0, 4096).await.error, 0);
}

/// A metadata-context request: export name, then the queries.
fn meta(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut b = (name.len() as u32).to_be_bytes().to_vec();
    b.extend_from_slice(name.as_bytes());
    b.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        b.extend_from_slice(&(q.len() as u32).to_be_bytes());
        b.extend_from_slice(q.as_bytes());
    }
    b
}

/// `base:allocation`: listed (for no query or its namespace), selected by `SET` only after
/// structured replies and only by its name, refused for another export or a malformed
/// request; once selected, `BLOCK_STATUS` answers one chunk for the context (a backend
/// without holes: all data), one descriptor with `REQ_ONE`; without it, `EINVAL`.
#[tokio::test]
async fn base_allocation_is_negotiated_and_answered() {
    let srv = mem_server();
    let mut c = srv.connect().await;
    c.start().await;
    let ctx = |d: &[u8]| {
        (
            u32::from_be_bytes(d[..4].try_into().unwrap()),
            d[4..].to_vec(),
        )
    };
    // SET before structured replies.
    let (ty, _) = c
        .option(
            NBD_OPT_SET_META_CONTEXT,
            &meta(EXPORT, &["base:allocation"]),
        )
        .await;
    assert_eq!(ty, NBD_REP_ERR_INVALID);
    for queries in [&[][..], &["base:"][..]] {
        c.send_option(NBD_OPT_LIST_META_CONTEXT, &meta("", queries))
            .await;
        let (_, ty, d) = c.option_reply().await;
        assert_eq!(ty, NBD_REP_META_CONTEXT, "LIST {queries:?}");
        assert_eq!(
            ctx(&d),
            (0, b"base:allocation".to_vec()),
            "a listed id is 0"
        );
        assert_eq!(c.option_reply().await.1, NBD_REP_ACK);
    }
    let (ty, _) = c
        .option(NBD_OPT_LIST_META_CONTEXT, &meta("", &["qemu:x"]))
        .await;
    assert_eq!(ty, NBD_REP_ACK, "nothing of another namespace");
    let (ty, _) = c
        .option(NBD_OPT_LIST_META_CONTEXT, &meta("nope", &[]))
        .await;
    assert_eq!(ty, NBD_REP_ERR_UNKNOWN);
    let (ty, _) = c.option(NBD_OPT_LIST_META_CONTEXT, &[0, 0, 0, 9]).await;
    assert_eq!(ty, NBD_REP_ERR_INVALID);
    assert_eq!(c.option(NBD_OPT_STRUCTURED_REPLY, &[]).await.0, NBD_REP_ACK);
    // SET by namespace selects nothing; by name, the context.
    let (ty, _) = c
        .option(NBD_OPT_SET_META_CONTEXT, &meta(EXPORT, &["base:"]))
        .await;
    assert_eq!(ty, NBD_REP_ACK);
    let set = |name: &'static str| meta(name, &["base:allocation"]);
    c.send_option(NBD_OPT_SET_META_CONTEXT, &set(EXPORT)).await;
    let (_, ty, d) = c.option_reply().await;
    assert_eq!(
        (ty, ctx(&d)),
        (NBD_REP_META_CONTEXT, (1, b"base:allocation".to_vec()))
    );
    assert_eq!(c.option_reply().await.1, NBD_REP_ACK);
    assert_eq!(
        c.info_or_go(NBD_OPT_GO, EXPORT, &[]).await.result,
        NBD_REP_ACK
    );
    for (flags, len) in [
        (0, 1u32 << 20),
        (NBD_CMD_FLAG_REQ_ONE, 8192),
        (NBD_CMD_FLAG_FUA, 512),
    ] {
        let r = c.call(NBD_CMD_BLOCK_STATUS, flags, 4096, len, &[]).await;
        assert_eq!(r.error, 0, "{}", r.message);
        assert_eq!(
            r.chunks,
            vec![(NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_BLOCK_STATUS)]
        );
        let mut want = 1u32.to_be_bytes().to_vec();
        want.extend_from_slice(&len.to_be_bytes());
        want.extend_from_slice(&0u32.to_be_bytes());
        assert_eq!(r.data, want);
    }
    let r = c
        .call(NBD_CMD_BLOCK_STATUS, NBD_CMD_FLAG_DF, 0, 512, &[])
        .await;
    assert_eq!(r.error, EINVAL);

    // A connection that selected nothing gets EINVAL.
    let (mut c, _, _) = srv.client(true).await;
    let r = c.call(NBD_CMD_BLOCK_STATUS, 0, 0, 512, &[]).await;
    assert_eq!(r.error, EINVAL);
    assert_eq!(c.read(0, 512).await.error, 0, "and goes on");

    // A SET replaces the selection even when it fails (the spec): an unknown export, a
    // malformed request.
    for bad in [set("nope"), vec![1, 2]] {
        let mut c = srv.connect().await;
        c.start().await;
        assert_eq!(c.option(NBD_OPT_STRUCTURED_REPLY, &[]).await.0, NBD_REP_ACK);
        c.send_option(NBD_OPT_SET_META_CONTEXT, &set(EXPORT)).await;
        assert_eq!(c.option_reply().await.1, NBD_REP_META_CONTEXT);
        assert_eq!(c.option_reply().await.1, NBD_REP_ACK);
        let (ty, _) = c.option(NBD_OPT_SET_META_CONTEXT, &bad).await;
        assert_ne!(ty, NBD_REP_ACK);
        assert_eq!(
            c.info_or_go(NBD_OPT_GO, EXPORT, &[]).await.result,
            NBD_REP_ACK
        );
        let r = c.call(NBD_CMD_BLOCK_STATUS, 0, 0, 512, &[]).await;
        assert_eq!(r.error, EINVAL, "the failed SET dropped base:allocation");
    }
}

#[tokio::test]
async fn oversized_option_is_too_big_and_absurd_one_closes() {
    let srv = mem_server();
    let mut c = srv.connect().await;
    c.start().await;
    let (ty, _) = c.option(NBD_OPT_GO, &vec![0u8; 100 << 10]).await;
    assert_eq!(ty, NBD_REP_ERR_TOO_BIG);
    let (ty, _) = c.option(0x99, &vec![0u8; 9000]).await;
    assert_eq!(ty, NBD_REP_ERR_TOO_BIG);
    let r = c.info_or_go(NBD_OPT_GO, EXPORT, &[]).await;
    assert_eq!(r.result, NBD_REP_ACK);

    let mut c = srv.connect().await;
    c.start().await;
    let mut hdr = IHAVEOPT.to_be_bytes().to_vec();
    hdr.extend_from_slice(&NBD_OPT_INFO.to_be_bytes());
    hdr.extend_from_slice(&u32::MAX.to_be_bytes());
    c.send(&hdr).await;
    c.expect_closed().await;

    // NBD_OPT_EXPORT_NAME longer than the 4096-byte string limit cannot be answered: close.
    let mut c = srv.connect().await;
    c.start().await;
    c.send_option(NBD_OPT_EXPORT_NAME, &vec![b'a'; 5000]).await;
    c.expect_closed().await;
    assert!(srv.server.stats().protocol_errors >= 2);
}

#[tokio::test]
async fn wrong_magic_and_bad_client_flags_close() {
    let srv = mem_server();
    // Wrong option magic.
    let mut c = srv.connect().await;
    c.start().await;
    c.send(&[0xde; 16]).await;
    c.expect_closed().await;
    // Unknown client flag.
    let mut c = srv.connect().await;
    c.greeting().await;
    c.send(&0x8000_0001u32.to_be_bytes()).await;
    c.expect_closed().await;
    // Wrong request magic in transmission closes only that connection.
    let (mut bad, _, _) = srv.client(false).await;
    let (mut good, _, _) = srv.client(true).await;
    bad.send(&[0x55; 28]).await;
    bad.expect_closed().await;
    assert_eq!(good.read(0, 512).await.error, 0);
}

#[tokio::test]
async fn export_name_with_and_without_zeroes() {
    let srv = mem_server();
    for no_zeroes in [true, false] {
        let mut c = srv.connect().await;
        c.greeting().await;
        let flags = NBD_FLAG_C_FIXED_NEWSTYLE | if no_zeroes { NBD_FLAG_C_NO_ZEROES } else { 0 };
        c.send(&flags.to_be_bytes()).await;
        c.send_option(NBD_OPT_EXPORT_NAME, EXPORT.as_bytes()).await;
        assert_eq!(c.u64().await, SIZE as u64);
        let tflags = c.u16().await;
        assert_ne!(tflags & NBD_FLAG_HAS_FLAGS, 0);
        if !no_zeroes {
            assert_eq!(c.read_exact(124).await, vec![0u8; 124]);
        }
        // The next bytes are the reply to our first request, not padding.
        let r = c.write(512, &[9; 512], NBD_CMD_FLAG_FUA).await;
        assert_eq!(r.error, 0);
        assert_eq!(c.read(512, 512).await.data, vec![9; 512]);
    }
    // A client without NBD_FLAG_C_FIXED_NEWSTYLE (non-fixed newstyle) still gets in.
    let mut c = srv.connect().await;
    c.greeting().await;
    c.send(&0u32.to_be_bytes()).await;
    c.send_option(NBD_OPT_EXPORT_NAME, b"").await;
    assert_eq!(c.u64().await, SIZE as u64);
    c.u16().await;
    assert_eq!(c.read_exact(124).await, vec![0u8; 124]);
    assert_eq!(c.read(0, 512).await.error, 0);
    // An unknown name cannot be refused politely: the server closes.
    let mut c = srv.connect().await;
    c.start().await;
    c.send_option(NBD_OPT_EXPORT_NAME, b"other").await;
    c.expect_closed().await;
}

#[tokio::test]
async fn client_vanishing_during_handshake_is_harmless() {
    let srv = mem_server();
    for cut in [0usize, 3, 10, 20] {
        let mut c = srv.connect().await;
        c.greeting().await;
        let mut bytes = (NBD_FLAG_C_FIXED_NEWSTYLE).to_be_bytes().to_vec();
        bytes.extend_from_slice(&IHAVEOPT.to_be_bytes());
        bytes.extend_from_slice(&NBD_OPT_GO.to_be_bytes());
        bytes.extend_from_slice(&100u32.to_be_bytes());
        c.send(&bytes[..cut.min(bytes.len())]).await;
        drop(c);
    }
    srv.wait_idle().await;
    let (mut c, _, _) = srv.client(false).await;
    assert_eq!(c.read(0, 512).await.error, 0);
}

// ------------------------------------------------------------------------------------------
// Transmission: data path
// ------------------------------------------------------------------------------------------

async fn roundtrip(structured: bool) {
    let srv = mem_server();
    let (mut c, size, _) = srv.client(structured).await;
    assert_eq!(size, SIZE as u64);
    let data = pattern(64 << 10, 3);
    assert_eq!(c.write(8192, &data, 0).await.error, 0);
    assert_eq!(c.write(0, &data[..4096], NBD_CMD_FLAG_FUA).await.error, 0);
    let r = c.read(8192, data.len() as u32).await;
    assert_eq!(r.error, 0);
    assert_eq!(r.data, data);
    if structured {
        assert_eq!(
            r.chunks,
            vec![(NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_OFFSET_DATA)]
        );
        assert_eq!(r.data_offset, Some(8192));
        // DF: one content chunk.
        let r = c
            .call(NBD_CMD_READ, NBD_CMD_FLAG_DF, 8192, 65536, &[])
            .await;
        assert_eq!(r.error, 0);
        assert_eq!(r.data, data);
        assert_eq!(r.chunks.len(), 1);
    } else {
        assert!(r.chunks.is_empty());
    }
    // FUA is accepted on every command.
    let flush = c.call(NBD_CMD_FLUSH, NBD_CMD_FLAG_FUA, 0, 0, &[]).await;
    assert_eq!(flush.error, 0);
    assert_eq!(srv.backend.flush_count(), 1);
    let read_fua = c.call(NBD_CMD_READ, NBD_CMD_FLAG_FUA, 0, 512, &[]).await;
    assert_eq!(read_fua.error, 0);
    // TRIM reads back as zeroes (MemBackend zeroes on trim).
    assert_eq!(c.call(NBD_CMD_TRIM, 0, 8192, 4096, &[]).await.error, 0);
    let r = c.read(8192, 8192).await;
    assert_eq!(&r.data[..4096], &[0u8; 4096][..]);
    assert_eq!(&r.data[4096..], &data[4096..8192]);
    // WRITE_ZEROES with every flag it accepts.
    let wz = NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO;
    let r = c.call(NBD_CMD_WRITE_ZEROES, wz, 12288, 8192, &[]).await;
    assert_eq!(r.error, 0);
    let r = c.read(12288, 8192).await;
    assert!(r.data.iter().all(|&b| b == 0));
    // CACHE validates and succeeds; a whole-device TRIM/zero larger than the payload limit too.
    assert_eq!(c.call(NBD_CMD_CACHE, 0, 0, 1 << 20, &[]).await.error, 0);
    let r = c.call(NBD_CMD_WRITE_ZEROES, 0, 0, SIZE as u32, &[]).await;
    assert_eq!(r.error, 0);
    // A maximal 32 MiB request is fine in both directions when the export is large enough:
    // the 4 MiB export here allows a whole-device read.
    let r = c.read(0, SIZE as u32).await;
    assert_eq!(r.data, vec![0u8; SIZE]);
    // DISC: the server closes after handling it.
    c.request(NBD_CMD_DISC, 0, 0, 0, &[]).await;
    c.expect_closed().await;
    let st = srv.server.stats();
    assert_eq!(st.requests.disc, 1);
    assert_eq!(st.bytes_written, (64 << 10) + 4096);
}

#[tokio::test]
async fn roundtrip_simple_replies() {
    roundtrip(false).await;
}

#[tokio::test]
async fn roundtrip_structured_replies() {
    roundtrip(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_come_back_out_of_order() {
    let backend = TestBackend::new(SIZE)
        .fault(0, Fault::Delay(Duration::from_millis(400)))
        .fault(4096, Fault::Delay(Duration::from_millis(200)));
    let srv = TestServer::start(backend, config());
    let (mut c, _, _) = srv.client(false).await;
    let data = pattern(4096, 7);
    c.write(8192, &data, 0).await;
    // Submit slow, medium, fast, and a write that is fast too.
    c.request_with_cookie(NBD_CMD_READ, 0, 100, 0, 4096, &[])
        .await;
    c.request_with_cookie(NBD_CMD_READ, 0, 200, 4096, 4096, &[])
        .await;
    c.request_with_cookie(NBD_CMD_READ, 0, 300, 8192, 4096, &[])
        .await;
    c.request_with_cookie(NBD_CMD_WRITE, 0, 400, 16384, 512, &[5; 512])
        .await;
    let mut order = Vec::new();
    for _ in 0..4 {
        let r = c.reply().await;
        assert_eq!(r.error, 0);
        if r.cookie == 300 {
            assert_eq!(r.data, data, "data matches its cookie");
        }
        order.push(r.cookie);
    }
    assert_eq!(&order[2..], &[200, 100], "slow requests complete last");
    assert!(order[..2].contains(&300) && order[..2].contains(&400));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_requests_in_flight_keep_their_cookies() {
    let srv = mem_server();
    let (mut c, _, _) = srv.client(true).await;
    for i in 0..64u64 {
        let data = pattern(4096, i as u8);
        c.request_with_cookie(NBD_CMD_WRITE, 0, 1000 + i, i * 4096, 4096, &data)
            .await;
    }
    let mut seen = std::collections::HashSet::new();
    for _ in 0..64 {
        let r = c.reply().await;
        assert_eq!(r.error, 0);
        assert!(seen.insert(r.cookie));
    }
    for i in 0..64u64 {
        c.request_with_cookie(NBD_CMD_READ, 0, i, i * 4096, 4096, &[])
            .await;
    }
    for _ in 0..64 {
        let r = c.reply().await;
        assert_eq!(r.data, pattern(4096, r.cookie as u8));
    }
}

// ------------------------------------------------------------------------------------------
// Transmission: bad requests
// ------------------------------------------------------------------------------------------

async fn bad_requests(structured: bool) {
    let srv = mem_server();
    let (mut c, size, _) = srv.client(structured).await;
    let end = size;
    let cases: Vec<(u16, u16, u64, u32, u32)> = vec![
        // kind, flags, offset, len, errno
        (NBD_CMD_READ, 0, end, 512, EINVAL),
        (NBD_CMD_READ, 0, end - 512, 1024, EINVAL),
        (NBD_CMD_READ, 0, u64::MAX - 511, 1024, EINVAL),
        (NBD_CMD_TRIM, 0, end, 512, EINVAL),
        (NBD_CMD_CACHE, 0, end, 512, EINVAL),
        (NBD_CMD_WRITE_ZEROES, 0, end - 512, 1024, ENOSPC),
        (NBD_CMD_READ, 0, 100, 512, EINVAL),
        (NBD_CMD_READ, 0, 0, 100, EINVAL),
        (NBD_CMD_TRIM, 0, 512, 511, EINVAL),
        (NBD_CMD_READ, 0, 0, 0, EINVAL),
        (NBD_CMD_READ, 0, 0, (32 << 20) + 512, EINVAL),
        (NBD_CMD_FLUSH, 0, 512, 0, EINVAL),
        (NBD_CMD_BLOCK_STATUS, 0, 0, 512, EINVAL),
        (77, 0, 0, 512, EINVAL),
        (NBD_CMD_READ, 1 << 12, 0, 512, EINVAL),
        (NBD_CMD_READ, NBD_CMD_FLAG_NO_HOLE, 0, 512, EINVAL),
        (NBD_CMD_TRIM, NBD_CMD_FLAG_FAST_ZERO, 0, 512, EINVAL),
        (NBD_CMD_WRITE_ZEROES, NBD_CMD_FLAG_REQ_ONE, 0, 512, EINVAL),
    ];
    for (kind, flags, offset, len, errno) in cases {
        let r = c.call(kind, flags, offset, len, &[]).await;
        assert_eq!(
            r.error,
            errno,
            "{} {flags:#x} {offset}+{len}",
            command_name(kind)
        );
        assert!(r.data.is_empty());
        if structured {
            assert_eq!(r.chunks, vec![(NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_ERROR)]);
            assert!(!r.message.is_empty());
        }
    }
    // DF is only valid once structured replies are negotiated.
    let r = c.call(NBD_CMD_READ, NBD_CMD_FLAG_DF, 0, 512, &[]).await;
    assert_eq!(r.error, if structured { 0 } else { EINVAL });

    // Refused writes still consume their payload: the next request parses fine.
    let r = c.write(end, &[1; 512], 0).await;
    assert_eq!(r.error, ENOSPC);
    let r = c.write(end - 512, &[1; 1024], 0).await;
    assert_eq!(r.error, ENOSPC);
    let r = c.write(3, &[1; 512], 0).await;
    assert_eq!(r.error, EINVAL);
    let r = c.write(0, &[1; 700], 0).await;
    assert_eq!(r.error, EINVAL);
    let r = c.write(0, &[1; 512], 0x100).await;
    assert_eq!(r.error, EINVAL);
    // 32 MiB + 512: refused, but a sane size to skip.
    let big = vec![2u8; (32 << 20) + 512];
    let r = c.write(0, &big, 0).await;
    assert_eq!(r.error, EINVAL);
    assert_eq!(
        c.read(0, 512).await.data,
        vec![0u8; 512],
        "nothing was written"
    );
    assert_eq!(c.write(0, &[3; 512], 0).await.error, 0);
    assert_eq!(c.read(0, 512).await.data, vec![3u8; 512]);
    let st = srv.server.stats();
    assert!(st.errors.einval >= 15 && st.errors.enospc >= 3, "{st:?}");
    // An unknown kind; BLOCK_STATUS without a context is counted as itself.
    assert_eq!((st.requests.unknown, st.requests.block_status), (1, 1));

    // An absurd WRITE length closes the connection instead of being skipped.
    c.request(NBD_CMD_WRITE, 0, 0, u32::MAX - 511, &[]).await;
    c.expect_closed().await;
    let (mut c2, _, _) = srv.client(structured).await;
    assert_eq!(c2.read(0, 512).await.data, vec![3u8; 512]);
}

#[tokio::test]
async fn bad_requests_simple() {
    bad_requests(false).await;
}

#[tokio::test]
async fn bad_requests_structured() {
    bad_requests(true).await;
}

#[tokio::test]
async fn read_only_export_refuses_writes_with_eperm() {
    let srv = TestServer::start(MemBackend::new(SIZE).with_read_only(true), config());
    let (mut c, _, flags) = srv.client(true).await;
    assert_ne!(flags & NBD_FLAG_READ_ONLY, 0);
    assert_eq!(
        flags & (NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_FAST_ZERO),
        0
    );
    assert_eq!(c.write(0, &[1; 512], 0).await.error, EPERM);
    assert_eq!(c.call(NBD_CMD_TRIM, 0, 0, 512, &[]).await.error, EPERM);
    let r = c.call(NBD_CMD_WRITE_ZEROES, 0, 0, 512, &[]).await;
    assert_eq!(r.error, EPERM);
    // EPERM wins over range errors; reads and flushes work.
    assert_eq!(c.write(SIZE as u64, &[1; 512], 0).await.error, EPERM);
    assert_eq!(c.read(0, 512).await.error, 0);
    assert_eq!(c.call(NBD_CMD_FLUSH, 0, 0, 0, &[]).await.error, 0);
    assert_eq!(srv.server.stats().errors.eperm, 4);
}

#[tokio::test]
async fn backend_errors_map_to_nbd_errors() {
    let backend = TestBackend::new(SIZE)
        .fault(0, Fault::Fail(|| BackendError::Io("media".into())))
        .fault(4096, Fault::Fail(|| BackendError::NoSpace("full".into())))
        .fault(8192, Fault::Fail(|| BackendError::ShuttingDown))
        .fault(12288, Fault::Panic);
    let srv = TestServer::start(backend, config());
    for structured in [false, true] {
        let (mut c, _, _) = srv.client(structured).await;
        let r = c.read(0, 512).await;
        assert_eq!(r.error, EIO);
        assert!(r.data.is_empty());
        if structured {
            assert_eq!(r.chunks, vec![(NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_ERROR)]);
            assert!(r.message.contains("media"), "{}", r.message);
        }
        assert_eq!(c.write(4096, &[1; 512], 0).await.error, ENOSPC);
        assert_eq!(c.call(NBD_CMD_TRIM, 0, 8192, 512, &[]).await.error, 108);
        // A panicking backend call becomes EIO; the connection goes on.
        assert_eq!(c.read(12288, 512).await.error, EIO);
        assert_eq!(c.read(16384, 512).await.error, 0);
    }
}

// ------------------------------------------------------------------------------------------
// Vanishing clients, limits, shutdown, TCP
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_whose_payload_never_comes() {
    let srv = mem_server();
    let (mut c, _, _) = srv.client(false).await;
    c.request(NBD_CMD_WRITE, 0, 0, 1 << 20, &[7; 100]).await;
    c.s.shutdown().await.expect("shutdown");
    drop(c);
    srv.wait_idle().await;
    let (mut c, _, _) = srv.client(false).await;
    assert_eq!(
        c.read(0, 512).await.data,
        vec![0u8; 512],
        "partial write not applied"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_with_requests_in_flight() {
    let backend = TestBackend::new(SIZE).fault(0, Fault::Delay(Duration::from_millis(300)));
    let srv = TestServer::start(backend, config());
    let (mut c, _, _) = srv.client(true).await;
    for _ in 0..20 {
        c.request(NBD_CMD_READ, 0, 0, 4096, &[]).await;
        c.request(NBD_CMD_WRITE, 0, 0, 4096, &[1; 4096]).await;
    }
    drop(c);
    // Another connection works meanwhile.
    let (mut other, _, _) = srv.client(false).await;
    assert_eq!(other.read(8192, 512).await.error, 0);
    drop(other);
    srv.wait_idle().await;
    // The connection waited for its backend calls before closing. (How many of the 40 were
    // read before the server noticed the peer was gone depends on timing.)
    assert_eq!(srv.backend.in_flight.load(Ordering::SeqCst), 0);
    assert!(srv.backend.completed.load(Ordering::SeqCst) >= 2);
    assert_eq!(srv.server.stats().connections_active, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_in_flight_requests() {
    let backend = TestBackend::new(SIZE).fault(0, Fault::Delay(Duration::from_millis(500)));
    let cfg = ServerConfig {
        shutdown_grace: Duration::from_millis(1500),
        ..config()
    };
    let mut srv = TestServer::start(backend, cfg);
    let (mut c, _, _) = srv.client(true).await;
    let (mut idle, _, _) = srv.client(false).await;
    let mut negotiating = srv.connect().await;
    negotiating.start().await;
    let slow = c.request(NBD_CMD_WRITE, 0, 0, 4096, &[4; 4096]).await;
    let fast = c.request(NBD_CMD_READ, 0, 4096, 4096, &[]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut silent = srv.connect().await;
    silent.start().await;
    srv.signal_stop();
    // A client still negotiating is told, and may abort politely.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = negotiating.info_or_go(NBD_OPT_GO, EXPORT, &[]).await;
    assert_eq!(r.result, NBD_REP_ERR_SHUTDOWN);
    let (ty, _) = negotiating.option(NBD_OPT_ABORT, &[]).await;
    assert_eq!(ty, NBD_REP_ACK);
    let got = [c.reply().await, c.reply().await];
    let mut cookies: Vec<u64> = got.iter().map(|r| r.cookie).collect();
    cookies.sort_unstable();
    assert_eq!(cookies, vec![slow, fast]);
    assert!(got.iter().all(|r| r.error == 0));
    c.expect_closed().await;
    idle.expect_closed().await;
    negotiating.expect_closed().await;
    // One that says nothing is closed after the grace period.
    silent.expect_closed().await;
    let backend = Arc::clone(&srv.backend);
    srv.stop().await.expect("serve_unix result");
    assert_eq!(backend.mem.contents()[..4096], [4u8; 4096]);
}

/// The shutdown grace bounds the drain of replies to a peer that does not read, not the
/// backend calls: a request slower than the grace still gets its reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_slower_than_the_grace_still_gets_its_reply() {
    let backend = TestBackend::new(SIZE).fault(0, Fault::Delay(Duration::from_millis(700)));
    let cfg = ServerConfig {
        shutdown_grace: Duration::from_millis(200),
        ..config()
    };
    let mut srv = TestServer::start(backend, cfg);
    let (mut c, _, _) = srv.client(true).await;
    let slow = c.request(NBD_CMD_WRITE, 0, 0, 4096, &[9; 4096]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    srv.signal_stop();
    let r = c.reply().await;
    assert_eq!((r.cookie, r.error), (slow, 0));
    c.expect_closed().await;
    let backend = Arc::clone(&srv.backend);
    srv.stop().await.expect("serve_unix result");
    assert_eq!(backend.mem.contents()[..4096], [9u8; 4096]);
}

/// At shutdown the server stops reading requests, but clients go on sending while replies are
/// due. Closing with those requests unread would be a reset (TCP RST; `ECONNRESET` on a unix
/// socket), and a client whose next send fails that way may drop replies it was sent: libnbd
/// failed 62 of 64 writes the server had carried out. On both transports the client reads its
/// reply, then end of stream; it may still send until it closes; its socket holds no error
/// after the server has closed; and what it sent after shutdown was not carried out. (TLS:
/// `tls.rs`, `requests_sent_after_shutdown_do_not_turn_the_tls_close_into_a_reset`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_sent_after_shutdown_do_not_turn_the_close_into_a_reset() {
    let cfg = ServerConfig {
        shutdown_grace: Duration::from_secs(5),
        ..config()
    };
    let backend = || TestBackend::new(SIZE).fault(0, Fault::Delay(Duration::from_secs(1)));
    let srv = TestServer::start(backend(), cfg.clone());
    let (c, _, _) = srv.client(false).await;
    close_after_shutdown(srv, c, |s| s.take_error()).await;
    let srv = TestServer::start_tcp(backend(), cfg, TlsPolicy::off()).await;
    let c = srv.tcp_client().await;
    close_after_shutdown(srv, c, |s| s.take_error()).await;
}

/// The lingering close does not wait for a client that sends nothing: nbdfuse, an idle
/// qemu-io or nbdsh do not close on end of stream, and held every shutdown for the whole grace.
/// Here one connection is idle and one had a request answered at the stop; neither closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_close_does_not_wait_for_a_quiet_client() {
    let grace = Duration::from_secs(5);
    let cfg = ServerConfig {
        shutdown_grace: grace,
        ..config()
    };
    let backend = TestBackend::new(SIZE).fault(0, Fault::Delay(Duration::from_millis(300)));
    let mut srv = TestServer::start(backend, cfg);
    let (mut idle, _, _) = srv.client(false).await;
    let (mut busy, _, _) = srv.client(false).await;
    let cookie = busy.request(NBD_CMD_WRITE, 0, 0, 4096, &[3; 4096]).await;
    srv.backend.wait_for_a_call().await;
    let started = std::time::Instant::now();
    srv.signal_stop();
    let r = busy.reply().await;
    assert_eq!((r.cookie, r.error), (cookie, 0));
    busy.expect_closed().await;
    idle.expect_closed().await;
    srv.stop().await.expect("serve_unix result");
    let took = started.elapsed();
    assert!(
        took < grace / 2,
        "shutdown took {took:?} with clients that send nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_bounded_when_the_client_stops_reading() {
    let grace = Duration::from_secs(1);
    let cfg = ServerConfig {
        shutdown_grace: grace,
        ..config()
    };
    let srv = TestServer::start(MemBackend::new(SIZE), cfg);
    let (mut c, _, _) = srv.client(false).await;
    // Far more reply data than the socket buffers hold; the client never reads it.
    for _ in 0..300 {
        c.request(NBD_CMD_READ, 0, 0, 1 << 20, &[]).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    srv.stop().await.expect("serve_unix result");
    // A grace for the request waiting for buffer budget (from the signal), and one for the
    // drain and the close (after the backend calls): 2 s by design; the bound shows it ends
    // (not hangs) with room for a loaded machine.
    let took = started.elapsed();
    assert!(took < grace * 5, "shutdown took {took:?}");
}

/// A client that stops reading its replies holds the connection's read buffers (up to
/// `max_inflight_bytes_per_connection`) only until `reply_stall_timeout`: then the connection
/// ends, its memory and slot are freed, and other clients go on. Idle connections and slow
/// backends do not count (`disconnect_with_requests_in_flight`, the other tests' clients).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_replies_is_disconnected() {
    let cfg = ServerConfig {
        reply_stall_timeout: Duration::from_millis(500),
        ..config()
    };
    let srv = TestServer::start(MemBackend::new(SIZE), cfg);
    let (mut idle, _, _) = srv.client(false).await;
    let (mut c, _, _) = srv.client(false).await;
    // Before the first request: the stall clock cannot start earlier, and sending the 64 may
    // itself stall on the full socket for a while.
    let started = std::time::Instant::now();
    // Far more reply data than the socket buffers hold; the client never reads it.
    for _ in 0..64 {
        c.request(NBD_CMD_READ, 0, 0, 1 << 20, &[]).await;
    }
    let deadline = std::time::Instant::now() + STEP;
    while srv.server.stats().connections_active != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the stalled client was kept"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    // The idle connection stayed (it waited longer than the stall limit for nothing).
    assert_eq!(idle.read(0, 512).await.error, 0);
    drop(c);
}

#[tokio::test]
async fn connection_limit_closes_extra_connections() {
    let srv = TestServer::start(
        MemBackend::new(SIZE),
        ServerConfig {
            max_connections: 1,
            ..config()
        },
    );
    let (mut first, _, _) = srv.client(false).await;
    let mut second = srv.connect().await;
    second.expect_closed().await;
    assert_eq!(first.read(0, 512).await.error, 0);
    assert_eq!(srv.server.stats().connections_rejected, 1);
    drop(first);
    srv.wait_idle().await;
    let (mut third, _, _) = srv.client(false).await;
    assert_eq!(third.read(0, 512).await.error, 0);
}

#[tokio::test]
async fn handshake_timeout_closes_silent_clients() {
    let srv = TestServer::start(
        MemBackend::new(SIZE),
        ServerConfig {
            handshake_timeout: Duration::from_millis(200),
            ..config()
        },
    );
    let mut c = srv.connect().await;
    c.greeting().await;
    c.expect_closed().await;
}

#[tokio::test]
async fn invalid_config_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = tokio::net::UnixListener::bind(dir.path().join("s")).expect("bind");
    let server = NbdServer::new(
        Arc::new(MemBackend::new(SIZE)),
        ServerConfig {
            export_name: "x".repeat(5000),
            ..config()
        },
    );
    let err = server
        .serve_unix(listener, std::future::pending())
        .await
        .expect_err("config must be refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

#[tokio::test]
async fn tcp_roundtrip() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = Arc::new(NbdServer::new(Arc::new(MemBackend::new(SIZE)), config()));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let s = Arc::clone(&server);
    let task = tokio::spawn(async move {
        s.serve_tcp(listener, async {
            let _ = rx.await;
        })
        .await
    });
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut c = Client::new(stream);
    c.start().await;
    let go = c.info_or_go(NBD_OPT_GO, EXPORT, &[]).await;
    assert_eq!(go.result, NBD_REP_ACK);
    let data = pattern(1 << 20, 9);
    assert_eq!(c.write(1 << 20, &data, NBD_CMD_FLAG_FUA).await.error, 0);
    assert_eq!(c.read(1 << 20, 1 << 20).await.data, data);
    c.request(NBD_CMD_DISC, 0, 0, 0, &[]).await;
    c.expect_closed().await;
    let _ = tx.send(());
    task.await.expect("join").expect("serve_tcp");
    assert_eq!(server.stats().handshakes_completed, 1);
}
