//! Serves a RAM disk over NBD on a unix socket, for manual checks with real clients.
//!
//! ```text
//! cargo run -p ftl-nbd --example memserve -- /tmp/mem.sock 64M [--read-only]
//! nbdinfo 'nbd+unix:///?socket=/tmp/mem.sock'
//! qemu-io -f raw 'nbd+unix:///?socket=/tmp/mem.sock' -c 'write -P 0xab 0 1M' -c 'read -P 0xab 0 1M'
//! ```
//! Stops on Ctrl-C or SIGTERM (graceful: in-flight requests finish) and removes the socket.
//! `RUST_LOG=debug` logs every request.

use anyhow::{bail, Context};
use ftl_nbd::{MemBackend, NbdServer, ServerConfig};
use std::path::PathBuf;
use std::sync::Arc;

/// Parses `123`, `4K`, `64M`, `1G` (powers of 1024).
fn parse_size(s: &str) -> anyhow::Result<usize> {
    let (num, shift) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 10),
        Some((i, 'M' | 'm')) => (&s[..i], 20),
        Some((i, 'G' | 'g')) => (&s[..i], 30),
        _ => (s, 0),
    };
    let n: usize = num.parse().with_context(|| format!("bad size {s:?}"))?;
    n.checked_mul(1 << shift).context("size overflows")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let read_only = args.iter().any(|a| a == "--read-only");
    let pos: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let [socket, size] = pos.as_slice() else {
        bail!("usage: memserve SOCKET SIZE [--read-only]   (SIZE like 64M)");
    };
    let socket = PathBuf::from(socket);
    let size = parse_size(size)?;
    if size % 512 != 0 {
        bail!("size must be a multiple of 512");
    }
    let _ = std::fs::remove_file(&socket);
    let listener = tokio::net::UnixListener::bind(&socket)
        .with_context(|| format!("binding {}", socket.display()))?;
    let backend = Arc::new(MemBackend::new(size).with_read_only(read_only));
    let server = NbdServer::new(backend, ServerConfig::default());
    eprintln!("serving {size} bytes on {}", socket.display());
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    let result = server.serve_unix(listener, shutdown).await;
    let _ = std::fs::remove_file(&socket);
    eprintln!(
        "stats: {}",
        serde_json::to_string(&server.stats()).unwrap_or_default()
    );
    Ok(result?)
}
