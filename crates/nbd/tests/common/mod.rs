//! Shared test helpers: a server on a temporary unix socket, a raw NBD client written from the
//! spec (independent of the server's codec except for constants), test backends and the
//! `require_tool` guard for real clients.
#![allow(dead_code)] // each test file uses a different subset

pub mod pki;

use ftl_nbd::protocol::*;
use ftl_nbd::{BackendError, BlockBackend, MemBackend, NbdServer, ServerConfig, TlsPolicy};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Upper bound for any single wait in a test.
pub const STEP: Duration = Duration::from_secs(20);
pub const EXPORT: &str = "test";
pub const DESCRIPTION: &str = "test export";

pub fn config() -> ServerConfig {
    ServerConfig {
        export_name: EXPORT.into(),
        description: DESCRIPTION.into(),
        ..ServerConfig::default()
    }
}

/// A server on a temporary unix socket; shut down (gracefully) by [`TestServer::stop`] or drop.
pub struct TestServer<B: BlockBackend> {
    pub server: Arc<NbdServer<B>>,
    pub backend: Arc<B>,
    pub path: PathBuf,
    /// The TCP address, for a server started with [`TestServer::start_tcp`].
    pub addr: Option<std::net::SocketAddr>,
    _dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl<B: BlockBackend> TestServer<B> {
    pub fn start(backend: B, config: ServerConfig) -> Self {
        Self::start_tls(backend, config, TlsPolicy::off())
    }

    /// A server on a unix socket with a TLS policy.
    pub fn start_tls(backend: B, config: ServerConfig, tls: TlsPolicy) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nbd.sock");
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        Self::launch(
            backend,
            config,
            tls,
            dir,
            path,
            None,
            |s, stop| async move {
                s.serve_unix(listener, async {
                    let _ = stop.await;
                })
                .await
            },
        )
    }

    /// A server on a free TCP port of 127.0.0.1 with a TLS policy (real TLS clients check the
    /// server's certificate against the host they connect to, which a unix socket has not).
    pub async fn start_tcp(backend: B, config: ServerConfig, tls: TlsPolicy) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let path = dir.path().join("unused.sock");
        Self::launch(
            backend,
            config,
            tls,
            dir,
            path,
            Some(addr),
            |s, stop| async move {
                s.serve_tcp(listener, async {
                    let _ = stop.await;
                })
                .await
            },
        )
    }

    /// Starts `serve(server, shutdown)` on the runtime.
    fn launch<F, Fut>(
        backend: B,
        config: ServerConfig,
        tls: TlsPolicy,
        dir: tempfile::TempDir,
        path: PathBuf,
        addr: Option<std::net::SocketAddr>,
        serve: F,
    ) -> Self
    where
        F: FnOnce(Arc<NbdServer<B>>, oneshot::Receiver<()>) -> Fut,
        Fut: std::future::Future<Output = std::io::Result<()>> + Send + 'static,
    {
        let backend = Arc::new(backend);
        let server = Arc::new(NbdServer::new(Arc::clone(&backend), config).with_tls(tls));
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(Arc::clone(&server), rx));
        Self {
            server,
            backend,
            path,
            addr,
            _dir: dir,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// libnbd's URI for the TCP server with TLS, the client's certificates in `certs`.
    pub fn nbds_uri(&self, certs: &std::path::Path) -> String {
        let a = self.addr.expect("a TCP server");
        format!(
            "nbds://{}:{}/{EXPORT}?tls-certificates={}",
            a.ip(),
            a.port(),
            certs.display()
        )
    }

    pub fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.path.display())
    }

    pub async fn connect(&self) -> Client<UnixStream> {
        let s = UnixStream::connect(&self.path).await.expect("connect");
        Client::new(s)
    }

    /// A client that finished the handshake with `NBD_OPT_GO` (structured replies if asked).
    pub async fn client(&self, structured: bool) -> (Client<UnixStream>, u64, u16) {
        let mut c = self.connect().await;
        c.start().await;
        if structured {
            let (ty, _) = c.option(NBD_OPT_STRUCTURED_REPLY, &[]).await;
            assert_eq!(ty, NBD_REP_ACK);
            c.structured = true;
        }
        let go = c
            .info_or_go(NBD_OPT_GO, EXPORT, &[NBD_INFO_BLOCK_SIZE])
            .await;
        assert_eq!(go.result, NBD_REP_ACK, "GO failed");
        let (size, flags) = go.export.expect("NBD_INFO_EXPORT");
        (c, size, flags)
    }

    /// A client of a server started with [`TestServer::start_tcp`] that finished the handshake
    /// with `NBD_OPT_GO` (simple replies).
    pub async fn tcp_client(&self) -> Client<tokio::net::TcpStream> {
        let addr = self.addr.expect("a TCP server");
        let s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut c = Client::new(s);
        c.start().await;
        let go = c.info_or_go(NBD_OPT_GO, EXPORT, &[]).await;
        assert_eq!(go.result, NBD_REP_ACK, "GO failed");
        c
    }

    /// Signals shutdown without waiting.
    pub fn signal_stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// Signals shutdown and waits for `serve_unix` to return.
    pub async fn stop(mut self) -> std::io::Result<()> {
        self.signal_stop();
        let task = self.task.take().expect("task");
        tokio::time::timeout(STEP, task)
            .await
            .expect("server did not stop in time")
            .expect("server task panicked")
    }

    /// Waits until no connection is open (connections close asynchronously).
    pub async fn wait_idle(&self) {
        let deadline = tokio::time::Instant::now() + STEP;
        while self.server.stats().connections_active != 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "connections did not close"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl<B: BlockBackend> Drop for TestServer<B> {
    fn drop(&mut self) {
        self.signal_stop();
    }
}

/// Result of `NBD_OPT_INFO` / `NBD_OPT_GO` as seen by the client.
#[derive(Debug, Default)]
pub struct InfoReply {
    pub result: u32,
    pub export: Option<(u64, u16)>,
    pub block_size: Option<(u32, u32, u32)>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub error_message: String,
}

/// One complete reply in the transmission phase.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reply {
    pub cookie: u64,
    /// 0 on success.
    pub error: u32,
    /// Read data (simple replies or OFFSET_DATA chunks, concatenated).
    pub data: Vec<u8>,
    /// Structured: (flags, type) of every chunk.
    pub chunks: Vec<(u16, u16)>,
    /// Structured error message, if any.
    pub message: String,
    /// Offset of the first OFFSET_DATA chunk.
    pub data_offset: Option<u64>,
}

/// A raw NBD client.
pub struct Client<S> {
    pub s: S,
    pub structured: bool,
    /// Expected data length of in-flight simple-reply reads, by cookie.
    pending_reads: HashMap<u64, usize>,
    next_cookie: u64,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    pub fn new(s: S) -> Self {
        Self {
            s,
            structured: false,
            pending_reads: HashMap::new(),
            next_cookie: 1,
        }
    }

    pub async fn read_exact(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0; n];
        tokio::time::timeout(STEP, self.s.read_exact(&mut b))
            .await
            .expect("timed out reading")
            .expect("read");
        b
    }

    pub async fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.read_exact(2).await.try_into().unwrap())
    }
    pub async fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.read_exact(4).await.try_into().unwrap())
    }
    pub async fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.read_exact(8).await.try_into().unwrap())
    }

    pub async fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).await.expect("send");
        self.s.flush().await.expect("flush");
    }

    /// Reads the greeting, returns the handshake flags.
    pub async fn greeting(&mut self) -> u16 {
        assert_eq!(self.u64().await, NBD_MAGIC, "NBDMAGIC");
        assert_eq!(self.u64().await, IHAVEOPT, "IHAVEOPT");
        self.u16().await
    }

    /// Greeting plus client flags FIXED_NEWSTYLE | NO_ZEROES.
    pub async fn start(&mut self) {
        let flags = self.greeting().await;
        assert_eq!(flags, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
        self.send(&(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES).to_be_bytes())
            .await;
    }

    pub async fn send_option(&mut self, opt: u32, data: &[u8]) {
        let mut b = Vec::new();
        b.extend_from_slice(&IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&opt.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        self.send(&b).await;
    }

    /// Reads one option reply: (option, type, data).
    pub async fn option_reply(&mut self) -> (u32, u32, Vec<u8>) {
        assert_eq!(self.u64().await, OPTION_REPLY_MAGIC, "option reply magic");
        let opt = self.u32().await;
        let ty = self.u32().await;
        let len = self.u32().await as usize;
        let data = self.read_exact(len).await;
        (opt, ty, data)
    }

    /// Sends an option with a single reply, returns (type, data).
    pub async fn option(&mut self, opt: u32, data: &[u8]) -> (u32, Vec<u8>) {
        self.send_option(opt, data).await;
        let (o, ty, d) = self.option_reply().await;
        assert_eq!(o, opt, "reply to the wrong option");
        (ty, d)
    }

    pub async fn info_or_go(&mut self, opt: u32, name: &str, infos: &[u16]) -> InfoReply {
        let mut p = Vec::new();
        p.extend_from_slice(&(name.len() as u32).to_be_bytes());
        p.extend_from_slice(name.as_bytes());
        p.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            p.extend_from_slice(&i.to_be_bytes());
        }
        self.send_option(opt, &p).await;
        let mut out = InfoReply::default();
        loop {
            let (o, ty, d) = self.option_reply().await;
            assert_eq!(o, opt);
            if ty != NBD_REP_INFO {
                out.result = ty;
                out.error_message = String::from_utf8_lossy(&d).into_owned();
                return out;
            }
            let info = u16::from_be_bytes([d[0], d[1]]);
            let be32 = |i: usize| u32::from_be_bytes(d[i..i + 4].try_into().unwrap());
            match info {
                NBD_INFO_EXPORT => {
                    assert_eq!(d.len(), 12);
                    let size = u64::from_be_bytes(d[2..10].try_into().unwrap());
                    let flags = u16::from_be_bytes([d[10], d[11]]);
                    out.export = Some((size, flags));
                }
                NBD_INFO_BLOCK_SIZE => {
                    assert_eq!(d.len(), 14);
                    out.block_size = Some((be32(2), be32(6), be32(10)));
                }
                NBD_INFO_NAME => out.name = Some(String::from_utf8(d[2..].to_vec()).unwrap()),
                NBD_INFO_DESCRIPTION => {
                    out.description = Some(String::from_utf8(d[2..].to_vec()).unwrap())
                }
                other => panic!("unexpected info {other}"),
            }
        }
    }

    /// Sends a request (and `payload` for writes); returns its cookie.
    pub async fn request(
        &mut self,
        kind: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> u64 {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        self.request_with_cookie(kind, flags, cookie, offset, length, payload)
            .await;
        cookie
    }

    pub async fn request_with_cookie(
        &mut self,
        kind: u16,
        flags: u16,
        cookie: u64,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) {
        let h = RequestHeader {
            magic: REQUEST_MAGIC,
            flags,
            kind,
            cookie,
            offset,
            length,
        };
        if kind == NBD_CMD_READ {
            self.pending_reads.insert(cookie, length as usize);
        }
        let mut b = h.encode().to_vec();
        b.extend_from_slice(payload);
        self.send(&b).await;
    }

    /// Reads one complete reply (all chunks of a structured reply).
    pub async fn reply(&mut self) -> Reply {
        let magic = self.u32().await;
        match magic {
            SIMPLE_REPLY_MAGIC => {
                let error = self.u32().await;
                let cookie = self.u64().await;
                let expect = self.pending_reads.remove(&cookie);
                let data = match expect {
                    Some(n) if error == 0 => self.read_exact(n).await,
                    _ => Vec::new(),
                };
                Reply {
                    cookie,
                    error,
                    data,
                    ..Reply::default()
                }
            }
            STRUCTURED_REPLY_MAGIC => {
                let mut r = Reply::default();
                let mut first = true;
                let mut magic = magic;
                loop {
                    assert_eq!(magic, STRUCTURED_REPLY_MAGIC, "chunk magic");
                    let flags = self.u16().await;
                    let ty = self.u16().await;
                    let cookie = self.u64().await;
                    let len = self.u32().await as usize;
                    let payload = self.read_exact(len).await;
                    if first {
                        r.cookie = cookie;
                        first = false;
                    }
                    assert_eq!(cookie, r.cookie, "chunks of one reply interleaved");
                    r.chunks.push((flags, ty));
                    match ty {
                        NBD_REPLY_TYPE_NONE => assert_eq!(len, 0),
                        NBD_REPLY_TYPE_OFFSET_DATA => {
                            assert!(len >= 9, "OFFSET_DATA length {len}");
                            let off = u64::from_be_bytes(payload[..8].try_into().unwrap());
                            r.data_offset.get_or_insert(off);
                            r.data.extend_from_slice(&payload[8..]);
                        }
                        NBD_REPLY_TYPE_ERROR | NBD_REPLY_TYPE_ERROR_OFFSET => {
                            r.error = u32::from_be_bytes(payload[..4].try_into().unwrap());
                            assert_ne!(r.error, 0, "error chunk with error 0");
                            let mlen = u16::from_be_bytes([payload[4], payload[5]]) as usize;
                            r.message = String::from_utf8(payload[6..6 + mlen].to_vec())
                                .expect("UTF-8 message");
                        }
                        // Its payload as sent: the context id, then the descriptors.
                        NBD_REPLY_TYPE_BLOCK_STATUS => r.data.extend_from_slice(&payload),
                        other => panic!("unexpected chunk type {other}"),
                    }
                    if flags & NBD_REPLY_FLAG_DONE != 0 {
                        break;
                    }
                    magic = self.u32().await;
                }
                self.pending_reads.remove(&r.cookie);
                r
            }
            other => panic!("bad reply magic {other:#x}"),
        }
    }

    /// Request and wait for its reply (nothing else in flight).
    pub async fn call(
        &mut self,
        kind: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> Reply {
        let cookie = self.request(kind, flags, offset, length, payload).await;
        let r = self.reply().await;
        assert_eq!(r.cookie, cookie, "cookie mismatch");
        r
    }

    pub async fn write(&mut self, offset: u64, data: &[u8], flags: u16) -> Reply {
        self.call(NBD_CMD_WRITE, flags, offset, data.len() as u32, data)
            .await
    }

    pub async fn read(&mut self, offset: u64, len: u32) -> Reply {
        self.call(NBD_CMD_READ, 0, offset, len, &[]).await
    }

    /// Asserts the server closes the connection (EOF or reset) without sending anything more.
    pub async fn expect_closed(&mut self) {
        let mut b = [0u8; 1];
        match tokio::time::timeout(STEP, self.s.read(&mut b)).await {
            Err(_) => panic!("server did not close the connection"),
            Ok(Ok(0)) | Ok(Err(_)) => {}
            Ok(Ok(_)) => panic!("unexpected data {:#x} instead of close", b[0]),
        }
    }
}

/// The client's side of a graceful shutdown with a request sent after it (see `protocol.rs`,
/// `requests_sent_after_shutdown_do_not_turn_the_close_into_a_reset`). The backend must hold
/// a write at offset 0 for a second or so. `socket_error` reads the socket's `SO_ERROR`.
pub async fn close_after_shutdown<S: AsyncRead + AsyncWrite + Unpin>(
    mut srv: TestServer<TestBackend>,
    mut c: Client<S>,
    socket_error: fn(&S) -> std::io::Result<Option<std::io::Error>>,
) {
    let slow = c.request(NBD_CMD_WRITE, 0, 0, 4096, &[7; 4096]).await;
    srv.backend.wait_for_a_call().await;
    srv.signal_stop();
    // The reader has stopped by now (well before the write is done); this request stays
    // unread.
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.request(NBD_CMD_WRITE, 0, 8192, 4096, &[8; 4096]).await;
    let r = c.reply().await;
    assert_eq!((r.cookie, r.error), (slow, 0));
    let mut b = [0u8; 1];
    match tokio::time::timeout(STEP, c.s.read(&mut b)).await {
        Ok(Ok(0)) => {}
        other => panic!("expected end of stream after the last reply, got {other:?}"),
    }
    let mut late = RequestHeader {
        magic: REQUEST_MAGIC,
        flags: 0,
        kind: NBD_CMD_WRITE,
        cookie: 99,
        offset: 16384,
        length: 4096,
    }
    .encode()
    .to_vec();
    late.extend_from_slice(&[9; 4096]);
    c.s.write_all(&late)
        .await
        .expect("a send after the server's end of stream, before the client closed");
    c.s.shutdown().await.expect("the client's close");
    let backend = Arc::clone(&srv.backend);
    srv.stop().await.expect("serve result");
    let err = socket_error(&c.s).expect("SO_ERROR");
    assert!(err.is_none(), "the server's close was a reset: {err:?}");
    let mem = backend.mem.contents();
    assert_eq!(mem[..4096], [7u8; 4096]);
    assert!(
        mem[4096..].iter().all(|&b| b == 0),
        "a request sent after shutdown was carried out"
    );
}

/// What [`TestBackend`] does for a request touching a given offset.
#[derive(Debug, Clone)]
pub enum Fault {
    Delay(Duration),
    Fail(fn() -> BackendError),
    Panic,
}

/// A [`MemBackend`] with per-offset delays and failures, counting in-flight calls.
pub struct TestBackend {
    pub mem: MemBackend,
    pub faults: parking_lot::Mutex<HashMap<u64, Fault>>,
    pub in_flight: AtomicUsize,
    pub completed: AtomicUsize,
}

impl TestBackend {
    pub fn new(size: usize) -> Self {
        Self {
            mem: MemBackend::new(size),
            faults: Default::default(),
            in_flight: AtomicUsize::new(0),
            completed: AtomicUsize::new(0),
        }
    }

    /// Waits until a call is in the backend (a request reached it and is held there).
    pub async fn wait_for_a_call(&self) {
        let deadline = tokio::time::Instant::now() + STEP;
        while self.in_flight.load(Ordering::SeqCst) == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no request reached the backend"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub fn fault(self, offset: u64, f: Fault) -> Self {
        self.faults.lock().insert(offset, f);
        self
    }

    async fn apply(&self, offset: u64) -> Result<(), BackendError> {
        let f = self.faults.lock().get(&offset).cloned();
        match f {
            None => Ok(()),
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
            Some(Fault::Fail(e)) => Err(e()),
            Some(Fault::Panic) => panic!("test backend panic at {offset}"),
        }
    }

    async fn around<F: std::future::Future<Output = Result<(), BackendError>>>(
        &self,
        offset: u64,
        f: F,
    ) -> Result<(), BackendError> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let r = match self.apply(offset).await {
            Ok(()) => f.await,
            Err(e) => Err(e),
        };
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.completed.fetch_add(1, Ordering::SeqCst);
        r
    }
}

impl BlockBackend for TestBackend {
    fn size(&self) -> u64 {
        self.mem.size()
    }
    fn read_only(&self) -> bool {
        false
    }
    fn queues(&self) -> usize {
        2
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        self.around(offset, self.mem.read(offset, buf)).await
    }
    async fn write(
        &self,
        queue: usize,
        offset: u64,
        data: Vec<u8>,
        fua: bool,
    ) -> Result<(), BackendError> {
        self.around(offset, self.mem.write(queue, offset, data, fua))
            .await
    }
    async fn flush(&self) -> Result<(), BackendError> {
        self.mem.flush().await
    }
    async fn trim(
        &self,
        queue: usize,
        offset: u64,
        len: u64,
        fua: bool,
    ) -> Result<(), BackendError> {
        self.around(offset, self.mem.trim(queue, offset, len, fua))
            .await
    }
    async fn write_zeroes(
        &self,
        queue: usize,
        offset: u64,
        len: u64,
        fua: bool,
    ) -> Result<(), BackendError> {
        self.around(offset, self.mem.write_zeroes(queue, offset, len, fua))
            .await
    }
}

/// Whether `tool` can be run. Missing: panics naming `debian_package` when `CI` is set,
/// otherwise prints a loud SKIP line and returns false.
pub fn require_tool(name: &str, debian_package: &str) -> bool {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
        .unwrap_or(false);
    if found {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{name} is required in CI: apt-get install {debian_package}");
    }
    eprintln!(
        "\n*** SKIP: {name} not found; install the Debian package `{debian_package}` to run this test ***\n"
    );
    false
}

/// A rustls client for the TLS tests: trusts `dir/ca-cert.pem` and presents
/// `dir/client-cert.pem` with `dir/client-key.pem` if they exist (the libnbd/qemu layout).
pub fn tls_connector(dir: &std::path::Path) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(dir.join("ca-cert.pem")).expect("ca-cert.pem") {
        roots.add(c.expect("CA certificate")).expect("add CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let cert = dir.join("client-cert.pem");
    let config = if cert.exists() {
        let chain = CertificateDer::pem_file_iter(&cert)
            .expect("client-cert.pem")
            .collect::<Result<Vec<_>, _>>()
            .expect("client certificate");
        let key = PrivateKeyDer::from_pem_file(dir.join("client-key.pem")).expect("client key");
        builder
            .with_client_auth_cert(chain, key)
            .expect("client auth")
    } else {
        builder.with_no_client_auth()
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// The name the test server's certificate is issued for.
pub fn server_name() -> rustls::pki_types::ServerName<'static> {
    rustls::pki_types::ServerName::try_from("localhost").expect("name")
}
