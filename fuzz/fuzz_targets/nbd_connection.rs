//! A whole NBD connection (`crates/nbd`): the input is what a client sends — handshake
//! options, then requests and their payloads — served by a 1 MiB memory export. Any input:
//! no panic, and the connection ends (the input's end is the client's EOF).
#![no_main]

use std::sync::{Arc, OnceLock};

use ftl_nbd::{MemBackend, NbdServer, ServerConfig};
use libfuzzer_sys::fuzz_target;

struct World {
    rt: tokio::runtime::Runtime,
    server: NbdServer<MemBackend>,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| World {
        rt: tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("tokio runtime"),
        server: NbdServer::new(Arc::new(MemBackend::new(1 << 20)), ServerConfig::default()),
    })
}

fuzz_target!(|data: &[u8]| {
    let w = world();
    let input = std::io::Cursor::new(data.to_vec());
    w.rt.block_on(w.server.serve_stream(input, tokio::io::sink(), "fuzz"));
});
