//! The control socket: a unix socket speaking one JSON request per line, one JSON reply per line.
//!
//! ```text
//! → {"cmd":"stats"}
//! ← {"ok":true,"pid":…,"image":…,"uptime_secs":…,"clock_secs":…,"bank_utilisation":[…],
//!    "ftl":{ftl::FtlStats},"nand":{nand_model::NandStats},"nbd":{ftl_nbd::ServerStats}}
//! → {"cmd":"ping"}
//! ← {"ok":true,"pid":…}
//! → anything else
//! ← {"ok":false,"error":"…"}
//! ```
//! Requests longer than [`MAX_REQUEST`] bytes close the connection. The server stops accepting
//! when the daemon shuts down; `ftld stats` is the client ([`request`]).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use ftl::Ftl;
use ftl_nbd::NbdServer;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;

use crate::backend::FtlBackend;

/// Longest request line accepted.
pub const MAX_REQUEST: u64 = 64 * 1024;
/// Control connections served at once.
const MAX_CLIENTS: usize = 16;

/// What the control server reports on.
pub struct ControlContext {
    pub ftl: Arc<Ftl>,
    pub nbd: Arc<NbdServer<FtlBackend>>,
    pub image: PathBuf,
    pub started: Instant,
}

/// A request line.
#[derive(Debug, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case", deny_unknown_fields)]
enum Request {
    Stats,
    Ping,
}

impl ControlContext {
    /// The reply to one request line.
    fn answer(&self, line: &str) -> Value {
        match serde_json::from_str::<Request>(line) {
            Ok(Request::Ping) => json!({"ok": true, "pid": std::process::id()}),
            Ok(Request::Stats) => {
                let uptime = self.started.elapsed();
                let nand = self.ftl.nand().stats();
                // Modelled busy time per bank (kept with timing off too) over the time served.
                let utilisation: Vec<f64> = nand
                    .banks
                    .iter()
                    .map(|b| b.busy_ns as f64 / (uptime.as_nanos().max(1) as f64))
                    .collect();
                json!({
                    "ok": true,
                    "pid": std::process::id(),
                    "image": self.image,
                    "uptime_secs": uptime.as_secs_f64(),
                    // The FTL's clock (since the image was opened), the one `--record`
                    // stamps requests with: a tool marks points in a recorded trace by it.
                    "clock_secs": self.ftl.now_ns() as f64 / 1e9,
                    // The async runtime's threads (`workers`; this handler runs on it).
                    "runtime_workers": tokio::runtime::Handle::try_current()
                        .ok()
                        .map(|h| h.metrics().num_workers()),
                    // How time passes: the mode, the timer, and whether idle CPUs are held
                    // polling (`serve::hold_idle_poll`; holds are process-wide).
                    "timing": {
                        "mode": self.ftl.nand().timing_mode(),
                        "timer": self.ftl.nand().timer(),
                        "idle_poll": nand_model::IdlePollHold::holds() > 0,
                        // Completion deadlines nearer than this are polled for by the event
                        // loop instead of arming its timer (`EventLoopTimer::fire_due_polling`;
                        // null: the timer runs its own thread).
                        "timer_poll_window_us": nand_model::installed_poll_window_ns()
                            .map(|ns| ns as f64 / 1000.0),
                    },
                    "bank_utilisation": utilisation,
                    "ftl": self.ftl.stats(),
                    "nand": nand,
                    "nbd": self.nbd.stats(),
                })
            }
            Err(e) => json!({
                "ok": false,
                "error": format!("bad request: {e} (expected {{\"cmd\":\"stats\"}} or {{\"cmd\":\"ping\"}})"),
            }),
        }
    }
}

/// Serves control connections until `shutdown` resolves.
pub async fn serve(
    listener: UnixListener,
    ctx: Arc<ControlContext>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let mut clients = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = clients.join_next() => {}
            res = listener.accept() => match res {
                Ok((stream, _)) if clients.len() < MAX_CLIENTS => {
                    let ctx = Arc::clone(&ctx);
                    clients.spawn(async move {
                        if let Err(e) = client(stream, &ctx).await {
                            tracing::debug!(error = %e, "control connection ended");
                        }
                    });
                }
                Ok(_) => tracing::warn!("control socket: too many clients, closing one"),
                Err(e) => {
                    tracing::warn!(error = %e, "control socket accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    clients.shutdown().await;
}

/// Answers the requests of one connection.
async fn client(stream: UnixStream, ctx: &ControlContext) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut r = tokio::io::BufReader::new(r);
    let mut line = String::new();
    loop {
        line.clear();
        let n = (&mut r).take(MAX_REQUEST).read_line(&mut line).await?;
        if n == 0 {
            return Ok(());
        }
        if !line.ends_with('\n') && n as u64 >= MAX_REQUEST {
            let reply = json!({"ok": false, "error": "request too long"});
            w.write_all(format!("{reply}\n").as_bytes()).await?;
            return Ok(());
        }
        let reply = ctx.answer(line.trim());
        w.write_all(format!("{reply}\n").as_bytes()).await?;
    }
}

/// Sends one request to the daemon at `socket` and returns its reply (an error if `ok` is not
/// true). Blocking; for `ftld stats`.
pub fn request(socket: &Path, cmd: &str) -> anyhow::Result<Value> {
    let mut s = std::os::unix::net::UnixStream::connect(socket).with_context(|| {
        format!(
            "cannot reach a daemon at control socket {} (is `ftld serve` running? pass \
             --control-socket or --image)",
            socket.display()
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    // One write of the whole line; a failure is the socket's, said as text: an EPIPE kept as
    // an io::Error would read as our own stdout's reader gone (`main`: exit 0, silently).
    let request = format!("{}\n", json!({ "cmd": cmd }));
    s.write_all(request.as_bytes()).map_err(|e| {
        anyhow::anyhow!(
            "writing to control socket {}: {e} (the process there closed it)",
            socket.display()
        )
    })?;
    let mut line = String::new();
    BufReader::new(&s)
        .take(16 << 20)
        .read_line(&mut line)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionReset => anyhow::anyhow!(
                "the process at control socket {} closed the connection without a reply (is it \
                 an ftld daemon?)",
                socket.display()
            ),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                anyhow::anyhow!("no reply from control socket {} in 30 s", socket.display())
            }
            _ => anyhow::anyhow!("reading from control socket {}: {e}", socket.display()),
        })?;
    if line.is_empty() {
        bail!(
            "the process at control socket {} closed the connection without a reply (is it an \
             ftld daemon?)",
            socket.display()
        );
    }
    let v: Value = serde_json::from_str(&line)
        .with_context(|| format!("daemon at {} sent a bad reply", socket.display()))?;
    if v.get("ok") != Some(&Value::Bool(true)) {
        bail!(
            "daemon at {} refused {cmd:?}: {}",
            socket.display(),
            v.get("error")
                .and_then(Value::as_str)
                .unwrap_or("no reason given")
        );
    }
    Ok(v)
}
