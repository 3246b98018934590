//! `ftld`: serves the ftl flash translation layer over emulated NAND as a Linux block device.
//!
//! | module | job |
//! |---|---|
//! | `cli` | clap definitions of the subcommands |
//! | `config` | the TOML file and merging it with flags |
//! | `serve` | `ftld serve`: frontend choice, open the image, NBD + control sockets, signals, clean shutdown |
//! | `ublk` | serving through the ublk frontend (`ftl-ublk`) |
//! | `notify` | systemd readiness (`READY=1`, `STATUS=`, `WATCHDOG=1`, `STOPPING=1`) |
//! | `backend` | the FTL as an NBD backend; FTL error → NBD error mapping |
//! | `control` | the control socket (JSON lines) and its client for `ftld stats` |
//! | `image` | creating/opening images, checking flags against an existing image |
//! | `replay` | `ftld replay`: a trace or workload in virtual time (`ftl-replay`) |
//! | `stalls` | `ftld stalls`: the host's scheduling stalls (`nand_model::StallProbe`) |
//! | `format`, `info`, `presets` | the other subcommands |
//! | `units` | sizes and listen addresses |
//!
//! Exit codes: 0 success, 1 runtime error, 2 usage error (bad flags, bad config file, options
//! that contradict an existing image). Errors are printed once, with their causes, on stderr.

/// `println!` that returns the write's error (`?`) instead of panicking: stdout may be a pipe
/// whose reader has gone (`ftld presets --json | head -1`), and then `main` exits quietly.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($t)*)?
    }};
}

/// `eprintln!` that drops the line when stderr is gone (a pipe whose reader went away) instead
/// of panicking.
macro_rules! note {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($t)*);
    }};
}

/// `print!` as [`out!`] does `println!`.
macro_rules! outp {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($t)*)?
    }};
}

mod backend;
mod cli;
mod config;
mod control;
mod faults;
mod format;
mod image;
mod info;
mod nand_options;
mod notify;
mod presets;
mod replay;
mod serve;
mod signals;
mod stalls;
mod ublk;
mod units;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

/// An error in what the user asked for (exit code 2), as opposed to one met while doing it.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A command that a signal ended after it finished its work its way (the figures so far
/// written): exit status 128 + the signal's number, as a shell reports a killed process.
#[derive(Debug)]
pub struct Interrupted(pub i32);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stopped by {}", signals::name(self.0))
    }
}

impl std::error::Error for Interrupted {}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A log line that cannot be written (stderr a pipe whose reader went away, as with
    // `ftld serve 2>&1 | head`) is dropped: by default the subscriber reports it with
    // `eprintln!`, which panics on the same broken pipe, inside whatever thread logged (a
    // connection's task, the signal handler: the daemon then died, or ignored SIGTERM).
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .log_internal_errors(false)
        .init();
}

fn main() -> ExitCode {
    // clap prints help/version (exit 0) and usage errors (exit 2) itself.
    let cli = Cli::parse();
    init_logging();
    let result = match &cli.command {
        Command::Serve(a) => serve::run(a),
        Command::Format(a) => format::run(a),
        Command::Info(a) => info::run(&a.image, a.json, a.config.as_deref()),
        Command::Stats(a) => stats(a),
        Command::Presets(a) => presets::print(a.json),
        Command::Replay(a) => replay::run(a),
        Command::Stalls(a) => stalls::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our stdout went away: nobody is left to tell, as for `cat | head`.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<Interrupted>().is_some() => {
            let signo = e.downcast_ref::<Interrupted>().map_or(0, |i| i.0);
            note!("ftld: {e}");
            ExitCode::from(u8::try_from(128 + signo).unwrap_or(1))
        }
        Err(e) => {
            note!("ftld: error: {}", error_chain(&e));
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// `e` and its causes, `: `-separated, leaving out a cause whose text the message before it
/// ends with already (an error that prints its source: "image X: Permission denied" followed
/// by its source "Permission denied" said it twice).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for link in e.chain() {
        let text = link.to_string();
        if out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `ftld stats`: asks the running daemon and prints its JSON reply.
fn stats(a: &cli::StatsArgs) -> anyhow::Result<()> {
    let socket = a
        .control_socket
        .clone()
        .unwrap_or_else(|| config::sibling(&a.image, "ctl"));
    let mut v = control::request(&socket, "stats")?;
    if let Some(o) = v.as_object_mut() {
        o.remove("ok");
    }
    out!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    /// An error that prints its source (`image X: Permission denied`) is not followed by the
    /// source again; other causes are.
    #[test]
    fn a_cause_the_message_already_shows_is_not_repeated() {
        let io = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let e = anyhow::Error::new(nand_model::ImageError::Io {
            path: "/x.img".into(),
            source: io,
        });
        assert_eq!(error_chain(&e), "image /x.img: permission denied");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_chain(&e), "outer: inner");
    }
}
