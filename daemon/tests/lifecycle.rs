//! The daemon's life cycle and command line, run as a user would: clean shutdown on SIGTERM,
//! the image lock, exit codes, `format`, `info`, `presets` and the default paths.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use e2e::daemon::wait_timeout;
use e2e::{run_ok, Daemon};
use serde_json::Value;

const FTLD: &str = env!("CARGO_BIN_EXE_ftld");

fn info_json(image: &Path) -> Value {
    let out = run_ok(Command::new(FTLD).arg("info").arg("--json").arg(image));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ftld info printed bad JSON: {e}\n{out}"))
}

/// Runs `cmd` expecting it to exit on its own within 60 s; returns (code, stderr).
fn run_to_exit(cmd: &mut Command) -> (i32, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ftld");
    let status = wait_timeout(&mut child, Duration::from_secs(60));
    if status.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let code = status
        .and_then(|s| s.code())
        .unwrap_or_else(|| panic!("{cmd:?} did not exit by itself:\n{stderr}"));
    (code, stderr)
}

#[test]
fn sigterm_flushes_checkpoints_and_exits_0() {
    let mut d = Daemon::start(FTLD);
    // Stats work while it runs; info does not (the image is locked).
    assert!(d.stats()["ftl"].is_object());
    assert_eq!(d.stats()["ftl"]["scheme"], "page");
    let (code, err) = run_to_exit(Command::new(FTLD).arg("info").arg(d.image()));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&d.pid().to_string()), "{err}");
    let status = d.stop();
    assert!(status.success(), "exit {status}:\n{}", d.log());
    let log = d.log();
    assert!(log.contains("SIGTERM"), "{log}");
    assert!(log.contains("clean shutdown"), "{log}");
    let info = info_json(&d.image());
    assert_eq!(info["clean_shutdown"], true, "{info:#}");
    assert_eq!(info["capacity_bytes"], 64u64 << 20, "{info:#}");
    assert!(info["checkpoint_id"].is_u64(), "{info:#}");
    assert_eq!(info["ftl"], "page", "{info:#}");
    let text = run_ok(Command::new(FTLD).arg("info").arg(d.image()));
    assert!(text.contains("clean"), "{text}");
    assert!(
        text.contains("ftl                page (page mapping"),
        "{text}"
    );
    assert!(
        !d.socket().exists(),
        "the NBD socket file is removed on exit"
    );
    assert!(
        !d.control_socket().exists(),
        "the control socket is removed on exit"
    );
    // And it comes back from the checkpoint.
    d.restart();
    assert!(d.log().contains("recovery=clean"), "{}", d.log());
}

#[test]
fn sigint_is_a_clean_shutdown_too() {
    let mut d = Daemon::start(FTLD);
    let status = d.stop_with(libc::SIGINT);
    assert!(status.success(), "exit {status}:\n{}", d.log());
    assert_eq!(info_json(&d.image())["clean_shutdown"], true);
}

#[test]
fn a_file_that_is_not_an_image_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("junk.img");
    std::fs::write(&img, vec![0x42u8; 1 << 20]).expect("write");
    let (code, err) = run_to_exit(
        Command::new(FTLD)
            .args(["serve", "--timing", "off", "--image"])
            .arg(&img),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&img.display().to_string()), "{err}");
    assert_eq!(
        std::fs::read(&img).expect("read").len(),
        1 << 20,
        "left untouched"
    );
}

#[test]
fn a_second_daemon_on_the_same_image_is_refused_naming_the_pid() {
    let d = Daemon::start(FTLD);
    let (code, err) = run_to_exit(&mut d.serve_command());
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&d.pid().to_string()),
        "message lacks pid {}: {err}",
        d.pid()
    );
    assert!(err.contains(&d.image().display().to_string()), "{err}");
    assert!(d.ping(), "the first daemon must keep serving");
}

/// `serve --read-only` of an image a kill -9 left dirty: the data written before the kill
/// reads back, and the image stays byte for byte as it was (no checkpoint at open or stop),
/// still dirty for `ftld info`. Readers share the image: `info` works beside the read-only
/// daemon, while a writable daemon and `format --force` are refused naming its pid.
#[test]
fn a_read_only_serve_of_a_crashed_image_reads_it_and_changes_nothing() {
    use e2e::nbd::Client;
    let mut d = Daemon::start(FTLD);
    let a: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    let b = vec![0x6bu8; 64 << 10];
    {
        let mut c = Client::connect(&d.socket()).expect("connect");
        assert_eq!(c.write(0, &a).expect("write"), 0);
        assert_eq!(c.write(2 << 20, &b).expect("write"), 0);
        c.flush().expect("flush");
        c.disconnect();
    }
    d.kill9();
    let before = std::fs::read(d.image()).expect("read the image");
    assert_eq!(info_json(&d.image())["clean_shutdown"], false);
    d.opts_mut().extra.push("--read-only".into());
    d.restart();
    let stats = d.stats();
    assert_eq!(
        stats["ftl"]["read_only"], "the image was opened read-only",
        "{stats:#}"
    );
    assert_eq!(
        stats["ftl"]["recovery"]["mode"], "roll-forward",
        "{stats:#}"
    );
    {
        let mut c = Client::connect(&d.socket()).expect("connect read-only");
        assert!(
            c.read(0, 1 << 20).expect("read") == a,
            "the 1 MiB written first"
        );
        assert!(c.read(2 << 20, 64 << 10).expect("read") == b);
        assert!(c
            .read(1 << 20, 1 << 20)
            .expect("read")
            .iter()
            .all(|&x| x == 0));
        assert_ne!(
            c.write(0, &[1u8; 4096]).expect("write"),
            0,
            "a write succeeded"
        );
        c.flush().expect("a flush on a read-only export");
        c.disconnect();
    }
    let info = info_json(&d.image());
    assert_eq!(info["clean_shutdown"], false, "{info:#}");
    let pid = d.pid().to_string();
    d.opts_mut().extra.clear();
    let (code, err) = run_to_exit(&mut d.serve_command());
    assert_eq!(code, 1, "a writable daemon beside a reader: {err}");
    assert!(err.contains(&pid), "{err}");
    let (code, err) = run_to_exit(
        Command::new(FTLD)
            .args(["format", "--force", "--image"])
            .arg(d.image()),
    );
    assert_ne!(code, 0, "format --force under a read-only daemon: {err}");
    assert!(err.contains(&pid), "{err}");
    let status = d.stop();
    assert!(status.success(), "exit {status}:\n{}", d.log());
    assert!(
        d.log().contains("opened read-only and is unchanged"),
        "{}",
        d.log()
    );
    assert!(
        std::fs::read(d.image()).expect("read the image") == before,
        "serve --read-only changed the image:\n{}",
        d.log()
    );
    assert_eq!(info_json(&d.image())["clean_shutdown"], false);
}

/// An image opens with the scheme it was formatted with; a `--ftl` that contradicts it is a
/// usage error naming the image and both schemes. `info` shows the scheme and its log pool.
#[test]
fn a_contradicting_ftl_scheme_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("b.img");
    let image = img.display().to_string();
    run_ok(Command::new(FTLD).args([
        "format",
        "--ftl",
        "bast",
        "--preset",
        "slc-small-004",
        "--capacity",
        "32M",
        "--image",
        &image,
    ]));
    let info: Value =
        serde_json::from_str(&run_ok(Command::new(FTLD).args(["info", "--json", &image])))
            .expect("json");
    assert_eq!(info["ftl"], "bast", "{info}");
    assert!(info["log_blocks"].as_u64().is_some_and(|n| n > 0), "{info}");
    let text = run_ok(Command::new(FTLD).args(["info", &image]));
    assert!(
        text.contains("bast (hybrid BAST") && text.contains("log blocks"),
        "{text}"
    );
    for args in [
        &[
            "serve", "--timing", "off", "--ftl", "fast", "--image", &image,
        ][..],
        &[
            "serve", "--timing", "off", "--ftl", "page", "--image", &image,
        ],
    ] {
        let (code, err) = run_to_exit(Command::new(FTLD).args(args));
        assert_eq!(code, 2, "{args:?}: {err}");
        let asked = args[4];
        assert!(
            err.contains(&image) && err.contains("bast") && err.contains(asked),
            "{args:?}: {err}"
        );
    }
}

/// A bad `[nbd]` or `[ublk]` value names the config file it is in and what it may be.
#[test]
fn bad_nbd_and_ublk_settings_name_the_config_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("n.img");
    let cfg = dir.path().join("c.toml");
    for (text, want) in [
        (
            "[nbd]\nmax_connections = 0\n",
            "[nbd] max_connections is too small: at least 1",
        ),
        (
            "[nbd]\nreply_stall_timeout_s = 0\n",
            "[nbd] reply_stall_timeout_s must be from 1 to 86400, not 0",
        ),
        (
            "[ublk]\nqueues = 0\n",
            "[ublk] queues and queue_depth in the config file",
        ),
    ] {
        std::fs::write(&cfg, text).expect("write");
        let (code, err) = run_to_exit(
            Command::new(FTLD)
                .args(["serve", "--timing", "off", "--image"])
                .arg(&img)
                .arg("--config")
                .arg(&cfg),
        );
        assert_eq!(code, 2, "{text}: {err}");
        assert!(err.contains(want), "{text}: {err}");
        assert!(err.contains(&cfg.display().to_string()), "{text}: {err}");
    }
}

/// More log blocks than the device has logical blocks is refused at format, naming the most it
/// can take (before, the geometry grew to hold them: 195 GiB of flash for 64 MiB of bast),
/// and no image is left behind.
#[test]
fn log_blocks_beyond_the_logical_blocks_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("b.img");
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[ftl]\nlog_blocks = 100000\n").expect("write");
    let (code, err) = run_to_exit(
        Command::new(FTLD)
            .args(["format", "--ftl", "bast", "--capacity", "64M", "--image"])
            .arg(&img)
            .arg("--config")
            .arg(&cfg),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("[ftl] log_blocks 100000 is more than the")
            && err.contains("logical blocks of a 64 MiB device"),
        "{err}"
    );
    assert!(!img.exists(), "an image was left: {err}");
    // The bound exactly (the default preset's 512 KiB blocks: 128 logical blocks in 64 MiB),
    // for either scheme with a log pool: one more is refused; as many is formatted, with a
    // warning that the flash grew to hold the logs.
    for scheme in ["bast", "fast"] {
        for (n, ok) in [(129, false), (128, true)] {
            std::fs::write(&cfg, format!("[ftl]\nlog_blocks = {n}\n")).expect("write");
            let (code, err) = run_to_exit(
                Command::new(FTLD)
                    .args([
                        "format",
                        "--force",
                        "--ftl",
                        scheme,
                        "--capacity",
                        "64M",
                        "--image",
                    ])
                    .arg(&img)
                    .arg("--config")
                    .arg(&cfg),
            );
            if ok {
                assert_eq!(code, 0, "{scheme} {n}: {err}");
                assert!(
                    err.contains(&format!("[ftl] log_blocks {n} needs")) && err.contains("against"),
                    "{scheme} {n}: {err}"
                );
            } else {
                assert_eq!(code, 2, "{scheme} {n}: {err}");
                assert!(
                    err.contains(&format!(
                        "log_blocks {n} is more than the 128 logical blocks"
                    )),
                    "{scheme} {n}: {err}"
                );
            }
        }
    }
}

/// `[ftl]` settings the image's scheme does not use are named, not dropped silently: a
/// format-time one (log_blocks on a scheme without a log pool) is refused, running policies
/// (page-scheme GC settings on a block-mapped scheme, log placement on the page scheme) are
/// warned of, when the image is made and when it is opened again; more PMCD controllers than
/// banks are warned of; `info` on a block-mapped image does not describe page frontiers.
#[test]
fn settings_a_scheme_does_not_use_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("s.img");
    let cfg = dir.path().join("c.toml");
    let format = |scheme: &str, toml: &str, extra: &[&str]| {
        std::fs::write(&cfg, toml).expect("write");
        run_to_exit(
            Command::new(FTLD)
                .args(["format", "--force", "--ftl", scheme, "--capacity", "64M"])
                .args(extra)
                .arg("--image")
                .arg(&img)
                .arg("--config")
                .arg(&cfg),
        )
    };
    for scheme in ["page", "nftl", "rftl", "gftl"] {
        let (code, err) = format(scheme, "[ftl]\nlog_blocks = 8\n", &[]);
        assert_eq!(code, 2, "{scheme}: {err}");
        assert!(
            err.contains(&format!(
                "[ftl] log_blocks = 8 does not apply to scheme {scheme}"
            )),
            "{scheme}: {err}"
        );
    }
    let (code, err) = format(
        "bast",
        "[ftl]\nseparation = \"hot-cold\"\nfrontiers = \"per-queue\"\nlog_placement = \"same\"\n\
         gc_threads = 4\ngc_free_pool = 9\nwear_level_spread = 50\n",
        &[],
    );
    assert_eq!(code, 0, "{err}");
    // (bast's merges level wear: wear_level_spread applies.)
    assert!(!err.contains("wear_level_spread does not apply"), "{err}");
    for key in ["separation", "frontiers", "gc_threads", "gc_free_pool"] {
        assert!(
            err.contains(&format!("[ftl] {key} does not apply to scheme bast")),
            "{key}: {err}"
        );
    }
    assert!(!err.contains("log_placement does not apply"), "{err}");
    // `format --force` refuses such settings before it removes the image it would replace.
    let (code, err) = format("page", "[ftl]\nlog_blocks = 8\n", &[]);
    assert_eq!(code, 2, "{err}");
    assert!(img.exists(), "the old image was removed: {err}");
    let info = run_ok(Command::new(FTLD).arg("info").arg(&img));
    assert!(
        info.contains("write queues") && !info.contains("per-queue"),
        "{info}"
    );
    // Opened again (the scheme is the image's, the flag says nothing): still named.
    std::fs::write(&cfg, "[ftl]\nvictim_policy = \"cost-benefit\"\n").expect("write");
    let (code, err) = run_to_exit(
        Command::new(FTLD)
            .args(["replay", "--workload", "seq,requests=10", "--image"])
            .arg(&img)
            .arg("--config")
            .arg(&cfg),
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("[ftl] victim_policy does not apply to scheme bast"),
        "{err}"
    );
    // A flag that sets an [ftl] setting is named as the flag.
    let (code, err) = run_to_exit(
        Command::new(FTLD)
            .args([
                "replay",
                "--workload",
                "seq,requests=10",
                "--gc-policy",
                "in-path",
                "--image",
            ])
            .arg(&img),
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("--gc-policy does not apply to scheme bast"),
        "{err}"
    );
    let (code, err) = format(
        "gftl",
        "[ftl]\nwear_level_spread = 7\n",
        &["--preset", "slc-small-004"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("[ftl] wear_level_spread does not apply to scheme gftl"),
        "{err}"
    );
    let (code, err) = format("page", "[ftl]\nlog_placement = \"spread\"\n", &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("[ftl] log_placement does not apply to scheme page"),
        "{err}"
    );
    let info = run_ok(Command::new(FTLD).arg("info").arg(&img));
    assert!(info.contains("frontiers = \"per-queue\""), "{info}");
    // The default preset has 16 banks.
    let (code, err) = format(
        "page",
        "",
        &["--interconnect", "pmcd", "--controllers", "1000"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("pmcd with 1000 controllers on 16 banks"),
        "{err}"
    );
}

/// `[ftl] overprovision` and `[ftl] log_blocks` are fixed when an image is formatted: given for
/// an existing image they must match it, or the start is refused naming the image and both
/// values (before, they were silently ignored).
#[test]
fn format_time_ftl_settings_must_match_an_existing_image() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("b.img");
    let image = img.display().to_string();
    let cfg = dir.path().join("c.toml");
    let config = cfg.display().to_string();
    std::fs::write(&cfg, "[ftl]\noverprovision = 0.1\nlog_blocks = 40\n").expect("write");
    run_ok(Command::new(FTLD).args([
        "format",
        "--ftl",
        "bast",
        "--preset",
        "slc-small-004",
        "--capacity",
        "32M",
        "--image",
        &image,
        "--config",
        &config,
    ]));
    let info = info_json(&img);
    assert_eq!(info["log_blocks"], 40, "{info:#}");
    // The same settings open it.
    let mut child = Command::new(FTLD)
        .args([
            "serve", "--timing", "off", "--image", &image, "--config", &config,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ftld");
    let ctl = img.with_extension("ctl");
    let t = std::time::Instant::now();
    while !ctl.exists() && t.elapsed() < Duration::from_secs(60) {
        if let Ok(Some(st)) = child.try_wait() {
            let out = child.wait_with_output().expect("wait");
            panic!("exited {st}: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    e2e::daemon::signal(child.id(), libc::SIGTERM);
    let st = wait_timeout(&mut child, Duration::from_secs(60)).expect("stops");
    assert!(st.success(), "{st}");
    for (text, field, asked) in [
        ("[ftl]\noverprovision = 0.2\n", "overprovision", "0.2"),
        ("[ftl]\nlog_blocks = 12\n", "log_blocks", "12"),
    ] {
        std::fs::write(&cfg, text).expect("write");
        let (code, err) = run_to_exit(Command::new(FTLD).args([
            "serve", "--timing", "off", "--image", &image, "--config", &config,
        ]));
        assert_eq!(code, 2, "{field}: {err}");
        assert!(
            err.contains(&image) && err.contains(field) && err.contains(asked),
            "{field}: {err}"
        );
    }
}

/// `[ftl] overprovision` sizes the spare of page, bast and fast only: for rftl, nftl and gftl
/// it is refused at format and at open (it used to be stored and ignored), and `info --json`
/// gives `overprovision` null and the spare the scheme keeps as `spare_factor`.
#[test]
fn overprovision_is_refused_where_it_does_not_apply() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("c.toml");
    let config = cfg.display().to_string();
    for scheme in ["rftl", "nftl", "gftl", "page"] {
        let img = dir.path().join(format!("{scheme}.img"));
        let image = img.display().to_string();
        let format = |with_config: bool| {
            let mut c = Command::new(FTLD);
            c.args([
                "format",
                "--ftl",
                scheme,
                "--preset",
                "slc-small-004",
                "--capacity",
                "16M",
                "--image",
                &image,
            ]);
            if with_config {
                c.args(["--config", &config]);
            }
            c
        };
        std::fs::write(&cfg, "[ftl]\noverprovision = 0.2\n").expect("write");
        if scheme != "page" {
            let (code, err) = run_to_exit(&mut format(true));
            assert_eq!(code, 2, "{scheme}: {err}");
            assert!(
                err.contains("overprovision = 0.2 does not apply to scheme")
                    && err.contains(scheme),
                "{scheme}: {err}"
            );
            assert!(!img.exists(), "{scheme}: no image is left");
            run_ok(&mut format(false));
            // An existing image refuses it too, for the same reason.
            let (code, err) = run_to_exit(Command::new(FTLD).args([
                "serve", "--timing", "off", "--image", &image, "--config", &config,
            ]));
            assert_eq!(code, 2, "{scheme}: {err}");
            assert!(err.contains("does not apply"), "{scheme}: {err}");
        } else {
            run_ok(&mut format(true));
        }
        let info = info_json(&img);
        let spare = info["spare_factor"].as_f64().expect("spare_factor");
        if scheme == "page" {
            assert_eq!(info["overprovision"], 0.2, "{info:#}");
            assert!(spare > 0.2, "{info:#}");
        } else {
            assert!(info["overprovision"].is_null(), "{scheme}: {info:#}");
            assert!(spare > 0.0, "{scheme}: {info:#}");
        }
        assert!(info["checkpoint_erase_max"].is_u64(), "{info:#}");
    }
}

/// A PMCD image (thesis ch. 4) keeps its interconnect: `info` shows it, a contradicting option
/// is refused naming the image and both, and `--controllers` needs `pmcd`.
#[test]
fn the_interconnect_is_chosen_at_format_and_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("p.img");
    let image = img.display().to_string();
    let out = run_ok(Command::new(FTLD).args([
        "format",
        "--ftl",
        "fast",
        "--preset",
        "k9-003",
        "--capacity",
        "32M",
        "--interconnect",
        "pmcd",
        "--controllers",
        "3",
        "--image",
        &image,
    ]));
    assert!(out.contains("pmcd (3 controllers"), "{out}");
    let info: Value =
        serde_json::from_str(&run_ok(Command::new(FTLD).args(["info", "--json", &image])))
            .expect("json");
    assert_eq!(
        info["nand"]["interconnect"],
        serde_json::json!({"kind": "pmcd", "controllers": 3}),
        "{info}"
    );
    let text = run_ok(Command::new(FTLD).args(["info", &image]));
    assert!(
        text.contains("interconnect       pmcd (3 controllers"),
        "{text}"
    );
    for extra in [
        &["--interconnect", "tmcd"][..],
        &["--interconnect", "pmcd", "--controllers", "4"],
    ] {
        let (code, err) = run_to_exit(
            Command::new(FTLD)
                .args(["serve", "--timing", "off", "--image", &image])
                .args(extra),
        );
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(
            err.contains(&image) && err.contains("pmcd (3 controllers") && err.contains(extra[1]),
            "{extra:?}: {err}"
        );
    }
    // `pmcd` without a count agrees with any PMCD image (the default is for new images).
    let sock = dir.path().join("p.sock");
    let mut serve = Command::new(FTLD)
        .args([
            "serve",
            "--timing",
            "off",
            "--interconnect",
            "pmcd",
            "--image",
            &image,
        ])
        .arg("--nbd-socket")
        .arg(&sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ftld serve");
    let t0 = std::time::Instant::now();
    while !sock.exists() && t0.elapsed() < Duration::from_secs(30) {
        if let Ok(Some(status)) = serve.try_wait() {
            panic!("ftld serve --interconnect pmcd refused a pmcd image: {status}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let served = sock.exists();
    let _ = serve.kill();
    let _ = serve.wait();
    assert!(
        served,
        "ftld serve --interconnect pmcd did not start on a pmcd image"
    );
    let (code, err) = run_to_exit(Command::new(FTLD).args([
        "format",
        "--image",
        &dir.path().join("q.img").display().to_string(),
        "--controllers",
        "2",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("controllers is a pmcd setting"), "{err}");
    assert!(!dir.path().join("q.img").exists());
    let presets = run_ok(Command::new(FTLD).arg("presets"));
    assert!(presets.contains("--interconnect pmcd"), "{presets}");
}

#[test]
fn options_that_contradict_the_image_are_usage_errors() {
    let mut d = Daemon::start(FTLD);
    assert!(d.stop().success());
    let image = d.image().display().to_string();
    let base = ["serve", "--timing", "off", "--image", &image];
    let (code, err) = run_to_exit(Command::new(FTLD).args(base).args(["--preset", "k9-003"]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&image) && err.contains("pages_per_block"),
        "{err}"
    );
    let (code, err) = run_to_exit(Command::new(FTLD).args(base).args(["--capacity", "128M"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&image) && err.contains("capacity"), "{err}");
    // The preset and capacity it was made with are fine.
    d.restart();
}

/// `ftld serve 2>&1 | head`: the log's reader goes away while the daemon serves. The daemon
/// drops log lines it cannot write, serves a client, and stops on SIGTERM with a clean
/// shutdown, the client's write on flash. Before, the log subscriber reported the failed write
/// with `eprintln!`, which panicked inside the thread that logged: the daemon died at the next
/// connection, or ignored SIGTERM and was left to kill -9.
#[test]
fn a_log_reader_that_goes_away_does_not_stop_the_daemon() {
    use std::io::BufRead;
    // The harness's daemon makes the image; the one under test is started by hand.
    let mut d = Daemon::start_with(
        FTLD,
        e2e::DaemonOpts {
            timing: "off".into(),
            ..Default::default()
        },
    );
    assert!(d.stop().success());
    let (image, socket) = (d.image(), d.socket());
    let mut serve = d.serve_command();
    let mut child = serve
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read the log until the daemon is ready, then close the pipe's read end (stdout too).
    let mut log = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("NBD server listening") {
        line.clear();
        assert!(log.read_line(&mut line).unwrap() > 0, "the daemon ended");
    }
    drop(log);
    drop(child.stdout.take());
    let data = vec![0x5au8; 65536];
    for _ in 0..3 {
        // Each connection logs lines nobody reads.
        let mut c = e2e::nbd::Client::connect(&socket).unwrap();
        c.write(0, &data).unwrap();
        c.disconnect();
    }
    e2e::daemon::signal(child.id(), libc::SIGTERM);
    let status = wait_timeout(&mut child, Duration::from_secs(60));
    if status.is_none() {
        let _ = child.kill();
    }
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    let info = run_ok(Command::new(FTLD).arg("info").arg(&image));
    assert!(info.contains("clean"), "{info}");
    d.restart();
    let mut c = e2e::nbd::Client::connect(&d.socket()).unwrap();
    assert_eq!(c.read(0, 65536).unwrap(), data);
    c.disconnect();
}

/// A second daemon given a socket the first one listens on is refused before it makes its
/// image (it used to create the image file, then fail on the socket, leaving the file).
#[test]
fn a_socket_in_use_is_refused_before_an_image_is_made() {
    let mut d = Daemon::start(FTLD);
    let other = d.dir().join("other.img");
    for (flag, path) in [
        ("--nbd-socket", d.socket()),
        ("--control-socket", d.control_socket()),
    ] {
        let (code, err) = run_to_exit(
            Command::new(FTLD)
                .args(["serve", "--frontend", "nbd", "--capacity", "64M", "--image"])
                .arg(&other)
                .arg(flag)
                .arg(&path),
        );
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("is in use by another process"), "{err}");
        assert!(!other.exists(), "{flag}: the image was made");
    }
    assert!(d.stop().success());
}

/// `format --force` replaces regular files only: a FIFO (or a device node: `/dev/null` as
/// root) and a symbolic link are refused and left as they were.
#[test]
fn format_force_replaces_only_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let target = dir.path().join("target");
    std::fs::write(&target, b"keep").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    for (path, why) in [(&fifo, "not a regular file"), (&link, "is a symbolic link")] {
        let (code, err) = run_to_exit(Command::new(FTLD).args([
            "format",
            "--force",
            "--capacity",
            "16M",
            "--image",
            &path.display().to_string(),
        ]));
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(why), "{err}");
    }
    let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&kind));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["serve", "--capacity", "12X"][..],
        &["serve", "--gc-policy", "eager"],
        &[
            "format",
            "--ftl",
            "dftl",
            "--image",
            "/nonexistent/dir/x.img",
        ],
        &[
            "serve",
            "--preset",
            "no-such-preset",
            "--image",
            "/nonexistent/dir/x.img",
        ],
        &["frobnicate"],
    ] {
        let (code, err) = run_to_exit(Command::new(FTLD).args(args));
        assert_eq!(code, 2, "{args:?}: {err}");
    }
    // Where the kernel has no ublk driver (this machine; the VM test covers ublk itself),
    // asking for it is a usage error that says why.
    if !std::path::Path::new("/dev/ublk-control").exists() {
        for args in [
            &["serve", "--frontend", "ublk"][..],
            &["serve", "--recover", "0"],
            &["serve", "--ublk-id", "0"],
        ] {
            let (code, err) = run_to_exit(Command::new(FTLD).args(args));
            assert_eq!(code, 2, "{args:?}: {err}");
            assert!(err.contains("/dev/ublk-control"), "{args:?}: {err}");
        }
    }
    let (code, err) =
        run_to_exit(Command::new(FTLD).args(["serve", "--frontend", "nbd", "--recover", "0"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("need the ublk frontend"), "{err}");
    // A wrong scheme name is refused naming the known ones, in the flag and in the file.
    let (code, err) = run_to_exit(Command::new(FTLD).args(["format", "--ftl", "noftl"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("noftl") && err.contains("page"), "{err}");
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("ftld.toml");
    std::fs::write(&cfg, "[ftl]\nscheme = \"noftl\"\n").expect("write");
    let (code, err) = run_to_exit(Command::new(FTLD).arg("format").arg("--config").arg(&cfg));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("noftl") && err.contains("ftld.toml"), "{err}");
    // rftl on a device where its bound cannot hold is a usage error that says why.
    let img = dir.path().join("rt.img");
    let (code, err) = run_to_exit(
        Command::new(FTLD)
            .args([
                "format",
                "--ftl",
                "rftl",
                "--preset",
                "board-000",
                "--image",
            ])
            .arg(&img),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("scheme rftl") && err.contains("pages"),
        "{err}"
    );
    assert!(!img.exists(), "no image is left behind");
    // gftl where a page copy is slower than an erase: the same, naming both times.
    let (code, err) = run_to_exit(
        Command::new(FTLD)
            .args(["format", "--ftl", "gftl", "--preset", "tlc", "--image"])
            .arg(&img),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("scheme gftl") && err.contains("longer than an erase"),
        "{err}"
    );
    assert!(!img.exists(), "no image is left behind");
    // Where it fits, `info` shows its spare: the write buffer its guarantee needs.
    run_ok(
        Command::new(FTLD)
            .args([
                "format",
                "--ftl",
                "gftl",
                "--preset",
                "slc-large-004",
                "--capacity",
                "64M",
                "--image",
            ])
            .arg(&img),
    );
    let info = run_ok(Command::new(FTLD).arg("info").arg(&img));
    assert!(
        info.contains("a write buffer of 137 blocks for 512 logical blocks"),
        "{info}"
    );
    // And its bounds: a step and the program; a step, an OOB search and the read.
    assert!(
        info.contains("a 4 KiB write within 2321 us, a read within 2867 us"),
        "{info}"
    );
}

#[test]
fn bad_config_files_are_usage_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("ftld.toml");
    std::fs::write(&cfg, "image = \"x.img\"\nunknown_key = 1\n").expect("write");
    let (code, err) = run_to_exit(Command::new(FTLD).arg("serve").arg("--config").arg(&cfg));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("unknown_key") && err.contains("ftld.toml"),
        "{err}"
    );
}

#[test]
fn config_file_values_apply_and_flags_override_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("ftld.toml");
    std::fs::write(
        &cfg,
        "image = \"disk.img\"\npreset = \"k9-003\"\ncapacity = \"32M\"\ntiming = \"off\"\n\
         [ftl]\nqueues = 3\nscheme = \"page\"\nfrontiers = \"per-queue\"\n",
    )
    .expect("write");
    let out = run_ok(
        Command::new(FTLD)
            .arg("format")
            .arg("--config")
            .arg(&cfg)
            .args(["--capacity", "16M"]),
    );
    assert!(
        out.contains("16 MiB") && out.contains("FTL scheme page"),
        "{out}"
    );
    let info = info_json(&dir.path().join("disk.img"));
    assert_eq!(info["capacity_bytes"], 16u64 << 20, "{info:#}");
    assert_eq!(
        info["nand"]["geometry"]["pages_per_block"], 64,
        "k9-003: {info:#}"
    );
    // Queues that own frontiers are what the format sets room aside for.
    assert_eq!(info["max_queues"], 3, "{info:#}");
}

#[test]
fn format_refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("sub/f.img");
    let fmt = |extra: &[&str]| {
        let mut c = Command::new(FTLD);
        c.arg("format").arg("--image").arg(&img);
        c.args(["--preset", "slc-large-004", "--capacity", "8M"])
            .args(extra);
        run_to_exit(&mut c)
    };
    assert_eq!(fmt(&[]).0, 0, "creates the directory too");
    assert_eq!(info_json(&img)["capacity_bytes"], 8u64 << 20);
    let (code, err) = fmt(&[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(fmt(&["--force"]).0, 0);
}

#[test]
fn info_on_a_missing_image_names_it() {
    let (code, err) = run_to_exit(Command::new(FTLD).args(["info", "/nonexistent/x.img"]));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("/nonexistent/x.img"), "{err}");
}

/// A 128 MiB default image (formatted for one frontier a bank) served with hot/cold separation
/// needs a block more than it has: `info` with those settings says the device opens writable
/// and turns read-only at its first bad block, and it does open writable (a replay writes to
/// it with those settings).
#[test]
fn info_says_settings_short_of_spare_on_a_device_with_no_bad_block_open_writable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("d.img");
    let conf = dir.path().join("hc.toml");
    std::fs::write(&conf, "[ftl]\nseparation = \"hot-cold\"\n").expect("config");
    run_ok(
        Command::new(FTLD)
            .args(["format", "--capacity", "128M", "--image"])
            .arg(&img),
    );
    let out = run_ok(
        Command::new(FTLD)
            .args(["info", "--json", "--config"])
            .arg(&conf)
            .arg(&img),
    );
    let v: Value = serde_json::from_str(&out).expect("info JSON");
    let (usable, need) = (
        v["usable_blocks"].as_u64().expect("usable"),
        v["blocks_needed"].as_u64().expect("need"),
    );
    assert!(usable < need, "the case this test is for: {v:#}");
    assert_eq!(v["data_bad_blocks"], 0, "{v:#}");
    let text = run_ok(
        Command::new(FTLD)
            .arg("info")
            .arg("--config")
            .arg(&conf)
            .arg(&img),
    );
    assert!(
        text.contains(&format!(
            "{usable} usable, {need} needed by page with the settings of {}: writable, but the \
             device turns read-only at its first bad block",
            conf.display()
        )),
        "{text}"
    );
    assert!(!text.contains("opens read-only"), "{text}");
    let (code, err) = run_to_exit(
        Command::new(FTLD)
            .args([
                "replay",
                "--workload",
                "random,requests=2000,read=0",
                "--image",
            ])
            .arg(&img)
            .arg("--config")
            .arg(&conf),
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("turns read-only at its first bad block"),
        "{err}"
    );
}

/// A page image formatted with hot/cold separation keeps that room out of its exported space
/// (the format counts the second temperature), and `ftld info --config` counts the need for
/// the settings it will be served with: more than for the default settings, still with slack
/// (a fresh 32 MiB image needed 192 blocks of its 175 before 2026-12-01). A bad `[ftl]` value
/// in that file is a usage error naming it.
#[test]
fn info_counts_the_need_for_the_settings_given_and_hot_cold_images_have_slack() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("hc.img");
    let conf = dir.path().join("hc.toml");
    std::fs::write(&conf, "[ftl]\nseparation = \"hot-cold\"\n").expect("config");
    run_ok(
        Command::new(FTLD)
            .args(["format", "--capacity", "32M", "--config"])
            .arg(&conf)
            .arg("--image")
            .arg(&img),
    );
    let default = info_json(&img);
    assert_eq!(
        default["need_settings"], "the default settings",
        "{default:#}"
    );
    let out = run_ok(
        Command::new(FTLD)
            .args(["info", "--json", "--config"])
            .arg(&conf)
            .arg(&img),
    );
    let hc: Value = serde_json::from_str(&out).expect("info JSON");
    let (usable, need, need_default) = (
        hc["usable_blocks"].as_u64().expect("usable"),
        hc["blocks_needed"].as_u64().expect("need"),
        default["blocks_needed"].as_u64().expect("need"),
    );
    assert!(need > need_default, "{hc:#}\n{default:#}");
    assert!(usable >= need + 8, "{hc:#}");
    let text = run_ok(
        Command::new(FTLD)
            .arg("info")
            .arg("--config")
            .arg(&conf)
            .arg(&img),
    );
    assert!(
        text.contains(&format!(
            "{usable} usable, {need} needed by page with the settings of {}: {} more may go bad",
            conf.display(),
            usable - need
        )),
        "{text}"
    );
    // Frontiers per queue: no more queues own blocks than the format kept them for, as the
    // open clamps them, so asking for more needs no more.
    let need_of = |text: String| {
        std::fs::write(&conf, text).expect("config");
        let out = run_ok(
            Command::new(FTLD)
                .args(["info", "--json", "--config"])
                .arg(&conf)
                .arg(&img),
        );
        let v: Value = serde_json::from_str(&out).expect("info JSON");
        v["blocks_needed"].as_u64().expect("need")
    };
    let max_queues = hc["max_queues"].as_u64().expect("max_queues");
    let per_queue = |q: u64| format!("[ftl]\nfrontiers = \"per-queue\"\nqueues = {q}\n");
    assert_eq!(need_of(per_queue(64)), need_of(per_queue(max_queues)));
    std::fs::write(&conf, "[ftl]\nhot_window = 0.0\n").expect("config");
    let (code, err) = run_to_exit(
        Command::new(FTLD)
            .args(["info", "--config"])
            .arg(&conf)
            .arg(&img),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("hot_window") && err.contains("hc.toml"),
        "{err}"
    );
}

/// Two-plane banks served with timing real: 128 KiB writes through NBD go out largely as
/// multi-plane programs (`ftld stats`), read back largely as multi-plane reads, and survive a
/// kill -9 after the flush.
#[test]
fn a_two_plane_image_is_written_with_multi_plane_programs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("planes.toml");
    std::fs::write(&cfg, "[nand]\nplanes = 2\n").expect("write");
    let mut d = Daemon::start_with(
        FTLD,
        e2e::daemon::DaemonOpts {
            timing: "real".into(),
            extra: vec!["--config".into(), cfg.display().to_string()],
            ..Default::default()
        },
    );
    let data: Vec<u8> = (0..4u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut c = e2e::nbd::Client::connect(&d.socket()).expect("connect");
    for (i, chunk) in data.chunks(128 << 10).enumerate() {
        assert_eq!(c.write((i as u64) << 17, chunk).expect("write"), 0);
    }
    c.flush().expect("flush");
    let count = |st: &serde_json::Value, key: &str| st["ftl"][key].as_u64().expect(key);
    let st = d.stats();
    let (multi, programs) = (
        count(&st, "multi_plane_programs"),
        count(&st, "nand_page_programs"),
    );
    eprintln!("{programs} host page programs, {multi} multi-plane programs");
    assert!(
        multi * 2 * 4 >= programs,
        "under a quarter of the pages in multi-plane programs: {st:#}"
    );
    for (i, chunk) in data.chunks(1 << 20).enumerate() {
        assert!(
            c.read((i as u64) << 20, 1 << 20).expect("read") == chunk,
            "MiB {i}"
        );
    }
    // The pairs multi-plane programs wrote are read back as multi-plane reads.
    let st = d.stats();
    let (multi, reads) = (
        count(&st, "multi_plane_reads"),
        count(&st, "nand_page_reads"),
    );
    eprintln!("{reads} host NAND reads, {multi} multi-plane");
    assert!(
        multi * 2 * 4 >= programs,
        "under a quarter of the pages read in multi-plane reads: {st:#}"
    );
    drop(c);
    d.kill9();
    d.restart();
    let mut c = e2e::nbd::Client::connect(&d.socket()).expect("connect");
    for (i, chunk) in data.chunks(1 << 20).enumerate() {
        assert!(
            c.read((i as u64) << 20, 1 << 20).expect("read") == chunk,
            "MiB {i} after kill -9"
        );
    }
    drop(c);
    assert!(d.stop().success());
}

/// `--preallocate` (and `preallocate = true`) allocate the whole image file: on an existing
/// sparse image when the daemon starts, keeping its data, and at `format`.
#[test]
fn preallocate_allocates_the_image_and_keeps_its_data() {
    use std::os::unix::fs::MetadataExt;
    let allocated = |p: &Path| {
        let m = std::fs::metadata(p).expect("stat the image");
        (m.blocks() * 512, m.len())
    };
    let mut d = Daemon::start_with(
        FTLD,
        e2e::daemon::DaemonOpts {
            timing: "off".into(),
            capacity: "64M".into(),
            ..Default::default()
        },
    );
    let data: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    let mut c = e2e::nbd::Client::connect(&d.socket()).expect("connect");
    assert_eq!(c.write(3 << 20, &data).expect("write"), 0);
    c.flush().expect("flush");
    drop(c);
    assert!(d.stop().success());
    let (used, len) = allocated(&d.image());
    assert!(
        used < len,
        "sparse by default: {used} of {len} bytes allocated"
    );
    d.opts_mut().extra.push("--preallocate".into());
    d.restart();
    let (used, len) = allocated(&d.image());
    assert!(
        used >= len,
        "--preallocate: {used} of {len} bytes allocated"
    );
    assert!(
        d.log().contains("preallocated the image file"),
        "{}",
        d.log()
    );
    let mut c = e2e::nbd::Client::connect(&d.socket()).expect("connect");
    assert!(c.read(3 << 20, 1 << 20).expect("read") == data, "data kept");
    assert!(
        c.read(5 << 20, 4096).expect("read").iter().all(|&b| b == 0),
        "unwritten sectors still read as zeroes"
    );
    drop(c);
    assert!(d.stop().success());

    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("pre.toml");
    std::fs::write(&cfg, "preallocate = true\n").expect("write");
    for (name, extra) in [("a.img", "--preallocate"), ("b.img", "--config")] {
        let img = dir.path().join(name);
        let mut cmd = Command::new(FTLD);
        cmd.args([
            "format",
            "--preset",
            "k9-003",
            "--capacity",
            "16M",
            "--image",
        ])
        .arg(&img)
        .arg(extra);
        if extra == "--config" {
            cmd.arg(&cfg);
        }
        run_ok(&mut cmd);
        let (used, len) = allocated(&img);
        assert!(
            used >= len,
            "format {extra}: {used} of {len} bytes allocated"
        );
    }
}

/// A tmpfs of a given size mounted on a new temporary directory (root only), unmounted
/// however the test ends.
struct SmallTmpfs(tempfile::TempDir);

impl SmallTmpfs {
    fn mount(size: &str) -> SmallTmpfs {
        let dir = tempfile::tempdir().expect("tempdir");
        run_ok(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(dir.path()),
        );
        SmallTmpfs(dir)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// `--preallocate` on a file system without room for the image: a clear error naming the
/// image and the cause, exit code 1; a new image is not left behind, an existing one is kept.
#[test]
fn preallocate_without_room_is_a_clear_error() {
    if !e2e::require_root() {
        return;
    }
    let dir = SmallTmpfs::mount("64M");
    let new = dir.path().join("new.img");
    let (code, err) = run_to_exit(
        Command::new(FTLD)
            .args(["format", "--preallocate", "--capacity", "256M", "--image"])
            .arg(&new),
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("image {}: cannot preallocate its", new.display()))
            && err.contains("No space left on device"),
        "{err}"
    );
    assert_eq!(
        err.matches("No space left on device").count(),
        1,
        "the cause once: {err}"
    );
    assert!(!new.exists(), "a half-made image is removed");
    // Sparse, the same image fits (nothing is written yet); preallocating it at serve fails
    // the same way and leaves it as it was.
    let old = dir.path().join("old.img");
    run_ok(
        Command::new(FTLD)
            .args(["format", "--capacity", "256M", "--image"])
            .arg(&old),
    );
    let (code, err) = run_to_exit(
        Command::new(FTLD)
            .args([
                "serve",
                "--frontend",
                "nbd",
                "--timing",
                "off",
                "--preallocate",
            ])
            .arg("--image")
            .arg(&old),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot preallocate its"), "{err}");
    assert_eq!(info_json(&old)["capacity_bytes"], 256u64 << 20);
}

/// A sparse image on a file system that fills up while it is served: the program that finds
/// no room is refused before anything is stored (the daemon used to die of SIGBUS, losing what
/// it buffered), the device turns read-only saying why, further writes get ENOSPC, SIGTERM
/// still stops it, no block is marked bad for it (a hybrid's merge copy that finds no room is
/// no fault of its block, nor of a merge's or a step's destination), and once there is room
/// again every flushed write reads back.
#[test]
fn a_file_system_that_fills_up_under_a_sparse_image_turns_it_read_only() {
    if !e2e::require_root() {
        return;
    }
    // The block-mapped schemes' merges and steps copy too: theirs must stop the same way
    // (gftl's runs out in a merge's copy here; page, nftl and rftl in a host page's program).
    for scheme in ["page", "fast", "nftl", "rftl", "gftl"] {
        fills_up(scheme);
    }
}

fn fills_up(scheme: &str) {
    let dir = SmallTmpfs::mount("24M");
    let logs = tempfile::tempdir().expect("tempdir");
    let image = dir.path().join("full.img");
    let socket = logs.path().join("s.sock");
    let serve = |log: &str| {
        let log = std::fs::File::create(logs.path().join(log)).expect("log file");
        let child = Command::new(FTLD)
            .args([
                "serve",
                "--frontend",
                "nbd",
                "--timing",
                "off",
                "--ftl",
                scheme,
            ])
            .args(["--preset", "slc-small-004", "--capacity", "64M", "--image"])
            .arg(&image)
            .arg("--nbd-socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn ftld");
        let t0 = std::time::Instant::now();
        let client = loop {
            if let Ok(c) = e2e::nbd::Client::connect(&socket) {
                break c;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "not ready");
            std::thread::sleep(Duration::from_millis(50));
        };
        (child, client)
    };
    let (mut child, mut c) = serve("first.log");
    let log = || std::fs::read_to_string(logs.path().join("first.log")).unwrap_or_default();
    // The first 16 MiB in order, then 4 KiB overwrites spread over them (merges, GC), then
    // the rest in order: the 64 MiB device needs more than the 24 MiB file system holds. A
    // flush after every 4 MiB; `model` holds what each 4 KiB block was flushed with.
    let stamp = |i: u64, gen: u64| vec![((i * 7 + gen) % 251) as u8 + 1; 4096];
    let mut written = vec![0u64; 64 * 256];
    let mut model = written.clone();
    // What each block was written with since the last flush: it may read as any of these.
    let mut unflushed: Vec<Vec<u64>> = vec![Vec::new(); 64 * 256];
    let mut failed = None;
    let mut since_flush = 0u64;
    let mut ops: Vec<(u64, u64)> = (0..16 * 256).map(|b| (b, 1)).collect();
    ops.extend((0..4096u64).map(|k| ((k * 2_654_435_761) % (16 * 256), 2 + k % 3)));
    ops.extend((16 * 256..64 * 256).map(|b| (b, 1)));
    for (b, gen) in ops {
        let e = c
            .write(b * 4096, &stamp(b, gen))
            .expect("a reply to the write");
        if e != 0 {
            failed = Some(format!("write of block {b}: errno {e}"));
            // A failed write leaves its range undefined: the block may read as it (its page
            // programmed before the device turned read-only under it) or as before.
            unflushed[b as usize].push(gen);
            break;
        }
        written[b as usize] = gen;
        unflushed[b as usize].push(gen);
        since_flush += 1;
        if since_flush == 1024 {
            let r = c
                .call(e2e::nbd::NBD_CMD_FLUSH, 0, 0, 0, &[])
                .expect("a reply");
            if r.error != 0 {
                failed = Some(format!("flush: errno {}", r.error));
                break;
            }
            model.clone_from(&written);
            unflushed.iter_mut().for_each(Vec::clear);
            since_flush = 0;
        }
    }
    let failed =
        failed.unwrap_or_else(|| panic!("{scheme}: no error on a full file system:\n{}", log()));
    assert!(
        child.try_wait().expect("wait").is_none(),
        "{scheme}: the daemon died:\n{}",
        log()
    );
    let stats = run_ok(
        Command::new(FTLD)
            .arg("stats")
            .arg("--control-socket")
            .arg(image.with_extension("ctl")),
    );
    let stats: Value = serde_json::from_str(&stats).expect("stats JSON");
    let why = stats["ftl"]["read_only"].as_str().unwrap_or_default();
    assert!(
        why.contains("has no room for it (No space left on device"),
        "{scheme}: {failed}: {stats:#}"
    );
    // Writes after it are refused with ENOSPC; reads still answer.
    assert_eq!(c.write(0, &stamp(0, 9)).expect("a reply"), 28, "{failed}");
    assert_eq!(c.read(0, 4096).expect("read"), stamp(0, written[0]));
    drop(c);
    e2e::daemon::signal(child.id(), libc::SIGTERM);
    let status = wait_timeout(&mut child, Duration::from_secs(60));
    assert!(
        status.is_some(),
        "{scheme}: SIGTERM did not stop it:\n{}",
        log()
    );
    assert!(!log().contains("panicked"), "{}", log());
    // The stop says what the next open does: the device turned read-only while serving, so
    // it rolls forward from the last checkpoint (none was written at the stop).
    assert!(
        log().contains("the device turned read-only (")
            && log().contains("next open rolls forward from the last one"),
        "{scheme}:\n{}",
        log()
    );

    // Room again: no block went bad, and the flushed writes read back.
    run_ok(
        Command::new("mount")
            .args(["-o", "remount,size=256M"])
            .arg(dir.path()),
    );
    assert_eq!(info_json(&image)["bad_blocks"], 0, "{scheme}:\n{}", log());
    let (mut child, mut c) = serve("second.log");
    for (b, &gen) in model.iter().enumerate().filter(|(_, &g)| g > 0) {
        let got = c.read(b as u64 * 4096, 4096).expect("read");
        let ok = std::iter::once(gen)
            .chain(unflushed[b].iter().copied())
            .any(|g| got == stamp(b as u64, g));
        assert!(
            ok,
            "{scheme}: block {b} (flushed with {gen}, then {:?}) reads {}, after: {failed}",
            unflushed[b], got[0]
        );
    }
    drop(c);
    e2e::daemon::signal(child.id(), libc::SIGTERM);
    assert!(wait_timeout(&mut child, Duration::from_secs(60)).is_some_and(|s| s.success()));
}

/// Runs ftld with its data segment limited to `kib` KiB (`ulimit -d`), as on a machine with
/// that much memory left; returns (code, stderr).
fn ftld_with_memory(kib: u64, args: &[&std::ffi::OsStr]) -> (i32, String) {
    run_to_exit(
        Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -d {kib} && exec \"$@\""))
            .arg("sh")
            .arg(FTLD)
            .args(args),
    )
}

/// A device whose tables and map would not fit in the memory left is refused with figures
/// before anything is allocated or written: a mistyped capacity (no image file is left), and
/// a forged header claiming 2^28 pages over a sparse file (`info` answers at once).
#[test]
fn a_device_too_large_for_the_memory_left_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("big.img");
    let (code, err) = ftld_with_memory(
        1 << 20,
        &[
            "format".as_ref(),
            "--capacity".as_ref(),
            "512G".as_ref(),
            "--image".as_ref(),
            img.as_os_str(),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "capacity 512 GiB: more RAM than this process can get; already a device exporting"
        ) && err.contains("needs about")
            && err.contains("this process can still get"),
        "{err}"
    );
    assert!(!img.exists(), "no image is left behind");
    // The same image with memory to spare is made (sparse, so it costs no disk).
    let small = dir.path().join("small.img");
    run_ok(
        Command::new(FTLD)
            .args(["format", "--capacity", "64M", "--image"])
            .arg(&small),
    );
    // Its header, claiming 2^28 pages, over a sparse file of the length that implies.
    let mut header = std::fs::read(&small).unwrap()[..4096].to_vec();
    let word = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let banks = word(&header, 16) * word(&header, 20);
    let blocks = (1u32 << 28) / (banks * word(&header, 28));
    header[24..28].copy_from_slice(&blocks.to_le_bytes());
    let crc = crc32fast::hash(&header[..4092]);
    header[4092..].copy_from_slice(&crc.to_le_bytes());
    let forged = dir.path().join("forged.img");
    std::fs::write(&forged, &header).unwrap();
    let (code, err) = run_to_exit(Command::new(FTLD).arg("info").arg(&forged));
    assert_eq!(code, 1, "{err}");
    let want = err
        .split("expected ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no expected length: {err}"));
    std::fs::File::options()
        .write(true)
        .open(&forged)
        .unwrap()
        .set_len(want)
        .unwrap();
    let (code, err) = ftld_with_memory(1 << 20, &["info".as_ref(), forged.as_os_str()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("a device of 268435456 pages needs about 1.2 GiB of RAM")
            && err.contains("for the NAND model's tables alone"),
        "{err}"
    );
}

/// A multi-level cell image and one with program/erase suspend: formatted from a preset and
/// `[nand]`, served, and shown by `ftld info` with their page-type latencies, read-retry and
/// suspend; a contradicting `[nand] suspend` on the existing image is a usage error.
#[test]
fn cell_types_and_suspend_reach_the_image() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tlc = dir.path().join("tlc.img");
    run_ok(
        Command::new(FTLD)
            .args(["format", "--preset", "tlc", "--capacity", "64M", "--image"])
            .arg(&tlc),
    );
    let text = run_ok(Command::new(FTLD).arg("info").arg(&tlc));
    assert!(
        text.contains("read 56.5/77.5/106 us, program 820.5/2225/5734 us (TLC LSB/CSB/MSB)")
            && text.contains("read-retry +1 read per 500 P/E cycles, at most 8"),
        "{text}"
    );
    let json = info_json(&tlc);
    let t = &json["nand"]["timing"];
    assert_eq!(t["cell"]["type"], "tlc", "{json}");
    assert_eq!(t["cell"]["t_read_upper_us"][1], 106, "{json}");
    // A TLC device with timing real is served and holds data like any other.
    let mut d = Daemon::start_with(
        FTLD,
        e2e::daemon::DaemonOpts {
            preset: "tlc".into(),
            timing: "real".into(),
            ..Default::default()
        },
    );
    let mut c = e2e::nbd::Client::connect(&d.socket()).expect("connect");
    let data: Vec<u8> = (0..64u32 << 10).map(|i| (i % 251) as u8).collect();
    assert_eq!(c.write(4096, &data).expect("write"), 0);
    c.flush().expect("flush");
    assert_eq!(c.read(4096, data.len() as u32).expect("read"), data);
    // Timing real with timer hybrid: idle CPUs are held polling while serving (root may).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(nand_model::current_cpu_latency_us().expect("readable"), 0);
        assert!(d.log().contains("idle CPUs poll"), "{}", d.log());
    }
    let st = d.stats();
    assert_eq!(st["timing"]["mode"], "real", "{st:#}");
    assert_eq!(st["timing"]["timer"], "hybrid", "{st:#}");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert_eq!(st["timing"]["idle_poll"], root, "{st:#}");
    // The event loop drives the NAND timer, with the poll window it measured (0-50 us).
    let window = st["timing"]["timer_poll_window_us"].as_f64();
    assert!(window.is_some_and(|w| (0.0..=50.0).contains(&w)), "{st:#}");
    // The runtime's threads by default: the usable CPUs minus one, at least 1.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(st["runtime_workers"], (cpus - 1).max(1), "{st:#}");
    drop(c);
    assert!(d.stop().success());

    // `--workers` sets them; the device serves as before.
    let mut d = Daemon::start_with(
        FTLD,
        e2e::daemon::DaemonOpts {
            extra: vec!["--workers".into(), "3".into()],
            ..Default::default()
        },
    );
    assert_eq!(d.stats()["runtime_workers"], 3);
    let mut c = e2e::nbd::Client::connect(&d.socket()).expect("connect");
    assert_eq!(c.write(0, &data).expect("write"), 0);
    assert_eq!(c.read(0, data.len() as u32).expect("read"), data);
    drop(c);
    assert!(d.stop().success());

    let cfg = dir.path().join("s.toml");
    std::fs::write(
        &cfg,
        "[nand]\nsuspend = true\nt_suspend_us = 25\nplanes = 2\n",
    )
    .expect("write");
    let s = dir.path().join("s.img");
    run_ok(
        Command::new(FTLD)
            .args(["format", "--capacity", "64M", "--config"])
            .arg(&cfg)
            .arg("--image")
            .arg(&s),
    );
    let text = run_ok(Command::new(FTLD).arg("info").arg(&s));
    assert!(
        text.contains("reads suspend programs/erases (suspend 25 us, resume 20 us)")
            && text.contains("2 plane(s) per bank"),
        "{text}"
    );
    assert_eq!(info_json(&s)["nand"]["planes"], 2);
    std::fs::write(&cfg, "[nand]\nplanes = 4\n").expect("write");
    let (code, err) = run_to_exit(
        Command::new(FTLD)
            .args(["serve", "--timing", "off", "--config"])
            .arg(&cfg)
            .arg("--image")
            .arg(&s),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("planes = 2, but [nand] asks for planes = 4") && err.contains("s.img"),
        "{err}"
    );
    std::fs::write(&cfg, "[nand]\nsuspend = false\n").expect("write");
    let (code, err) = run_to_exit(
        Command::new(FTLD)
            .args(["serve", "--timing", "off", "--config"])
            .arg(&cfg)
            .arg("--image")
            .arg(&s),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("but [nand] asks for suspend"), "{err}");
    // A device described in [nand] on top of a preset: an MLC part with its own latencies.
    std::fs::write(
        &cfg,
        "[nand]\ncell = \"mlc\"\nt_read_us = [30, 45.5]\nt_prog_us = [200, 650]\n\
         read_retry_every_pe = 1000\nread_retry_max_steps = 3\n",
    )
    .expect("write");
    let m = dir.path().join("m.img");
    run_ok(
        Command::new(FTLD)
            .args([
                "format",
                "--preset",
                "k9-003",
                "--capacity",
                "64M",
                "--config",
            ])
            .arg(&cfg)
            .arg("--image")
            .arg(&m),
    );
    let text = run_ok(Command::new(FTLD).arg("info").arg(&m));
    assert!(
        text.contains("read 30/45.5 us, program 200/650 us (MLC LSB/MSB)")
            && text.contains("read-retry +1 read per 1000 P/E cycles, at most 3"),
        "{text}"
    );
    // The same options open it again; a bad table is refused with the key named.
    run_ok(
        Command::new(FTLD)
            .args([
                "format",
                "--preset",
                "k9-003",
                "--capacity",
                "64M",
                "--force",
                "--config",
            ])
            .arg(&cfg)
            .arg("--image")
            .arg(&m),
    );
    std::fs::write(&cfg, "[nand]\ncell = \"qlc\"\n").expect("write");
    let (code, err) = run_to_exit(
        Command::new(FTLD)
            .args(["format", "--capacity", "64M", "--config"])
            .arg(&cfg)
            .arg("--image")
            .arg(dir.path().join("q.img")),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("t_read_us and t_prog_us"), "{err}");
}

#[test]
fn presets_lists_every_preset() {
    let out = run_ok(Command::new(FTLD).arg("presets"));
    for name in [
        "default",
        "board-000",
        "lftl-card",
        "k9-003",
        "slc-small-004",
        "slc-large-004",
        "nvmevirt-970pro",
        "tlc",
        "qlc",
    ] {
        assert!(out.contains(name), "{name} missing:\n{out}");
    }
    assert!(
        out.contains("56-106/820-5734/3000us"),
        "tlc page types:\n{out}"
    );
    assert!(out.contains("FTL schemes"), "{out}");
    assert!(out.contains("  page   page mapping"), "{out}");
    assert!(out.contains("  bast   hybrid BAST"), "{out}");
    assert!(out.contains("  fast   hybrid FAST"), "{out}");
    assert!(out.contains("  rftl   real-time RFTL"), "{out}");
    assert!(out.contains("  nftl   block-level NFTL"), "{out}");
    assert!(out.contains("  gftl   real-time GFTL"), "{out}");
    assert!(out.contains("gftl gives the same bound"), "{out}");
    assert!(
        out.contains("presets k9-003, slc-small-004, slc-large-004, nvmevirt-970pro."),
        "{out}"
    );
    let help = run_ok(Command::new(FTLD).args(["format", "--help"]));
    assert!(
        help.contains("--ftl <SCHEME>")
            && help.contains("[possible values: page, bast, fast, rftl, nftl, gftl]"),
        "{help}"
    );
    let json: Value = serde_json::from_str(&run_ok(Command::new(FTLD).args(["presets", "--json"])))
        .expect("json");
    assert_eq!(json.as_array().map(Vec::len), Some(9));
    // Latencies are numbers of microseconds, as in the table (k9-003: 25/200/1500 us).
    let k9 = json
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "k9-003"))
        .expect("k9-003");
    let t = &k9["config"]["timing"];
    assert_eq!(t["t_read_us"], 25, "{t}");
    assert_eq!(t["t_prog_us"], 200, "{t}");
    assert_eq!(t["t_erase_us"], 1500, "{t}");
    // What the table and notes say is in the JSON too: exported sizes per scheme, and which
    // schemes' guarantees the device supports (k9-003 fits rftl; the default preset does not).
    assert!(k9["export_bytes"]["page"].as_u64().unwrap_or(0) > 0, "{k9}");
    assert!(k9["export_bytes"]["bast"].as_u64().unwrap_or(0) > 0, "{k9}");
    let names = |p: &Value| -> Vec<String> {
        p["schemes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(names(k9).contains(&"rftl".to_string()), "{k9}");
    let default = json
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "default"))
        .expect("default preset");
    assert!(!names(default).contains(&"rftl".to_string()), "{default}");
    assert!(names(default).contains(&"page".to_string()), "{default}");
    assert!(default["schemes_unfit"]["rftl"].is_string(), "{default}");
}

/// A reader that stops early (`ftld presets --json | head -1`) ends ftld quietly: no panic
/// message, exit 0, for every subcommand that prints a lot.
#[test]
fn closed_stdout_exits_quietly() {
    for args in [&["presets", "--json"][..], &["presets"][..]] {
        let mut child = Command::new(FTLD)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        // Close our end of the pipe before ftld writes: every write then fails with EPIPE.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.status.success(), "{args:?}: {:?} {err}", out.status);
    }
}

#[test]
fn serve_defaults_to_ftld_data_in_the_working_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(FTLD)
        .args([
            "serve",
            "--timing",
            "off",
            "--preset",
            "slc-small-004",
            "--capacity",
            "16M",
        ])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let data = dir.path().join("ftld-data");
    let mut ready = false;
    for _ in 0..3000 {
        if std::os::unix::net::UnixStream::connect(data.join("ftld.ctl")).is_ok() {
            ready = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    e2e::daemon::signal(child.id(), libc::SIGTERM);
    let status = wait_timeout(&mut child, Duration::from_secs(60));
    if status.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("wait");
    assert!(ready, "control socket never appeared");
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(data.join("ftld.img").is_file());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let sock = data.join("ftld.sock");
    assert!(
        stdout.contains(&format!("nbd+unix:///?socket={}", sock.display())),
        "connect help lacks the URI:\n{stdout}"
    );
    assert!(
        stdout.contains("nbdfuse") && stdout.contains("losetup"),
        "{stdout}"
    );
}

/// `ftld stats` against a socket whose process closes without answering says so and fails
/// (it is not an ftld daemon, or it died), whether it read the request first or not. Before,
/// a close in the middle of the request's write exited 0 with no output (the EPIPE was taken
/// for our own stdout's reader going away).
#[test]
fn stats_from_a_socket_that_closes_without_a_reply_fails_saying_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (round, read_first) in [true, false, true, false].into_iter().enumerate() {
        let sock = dir.path().join(format!("x{round}.ctl"));
        let listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().expect("accept");
            if read_first {
                let mut b = [0u8; 4];
                let _ = std::io::Read::read(&mut c, &mut b);
            }
        });
        let (code, err) = run_to_exit(
            Command::new(FTLD)
                .arg("stats")
                .arg("--control-socket")
                .arg(&sock),
        );
        server.join().expect("server");
        assert_eq!(code, 1, "read first: {read_first}: {err}");
        assert!(
            err.contains(&sock.display().to_string()) && err.contains("closed"),
            "read first: {read_first}: {err}"
        );
    }
}
