#!/usr/bin/env python3
"""Per-write GC bound (issue 14; RFTL, paper 004): FUA 4 KiB random writes to a device filled to
95 %, one at a time (closed loop, QD 1: what a write waits for is its own work, not other
writes'), against the bound computed from the preset's timing.

What a FUA write may wait for, on the bank its page goes to:
  own     transfer + t_prog (the page itself)
  erase   t_erase: GC does not wait for its erases (the bank's timeline keeps later work
          behind them), so a step can leave one running that the page then queues behind
  copy    one GC page move: a copyback (t_read + t_prog) or a page moved through the
          controller (t_read + 2 transfers + t_prog), whichever is longer
A page sent to a bank under its soft floor first pays its share of that bank's cleaning: the
steady-state ratio (V + 1) / (P - V) steps for victims with V valid pages of P, times how far
the bank is under its floor, never more than 8 steps (`IN_PATH_STEPS`). With `in-path` GC this
is all the cleaning; with background workers (`adaptive`) it only happens on a bank they let
fall to its GC reserve, and otherwise a write waits for at most what a worker has under way on
its bank (an erase and the step after it: own + erase + copy, RFTL's T_erase + T_prog + T_read
plus the page's own program). So for both: bound = own + erase + 8 copies, and `one-step`
= own + erase + copy is shown beside it. A write that finds no bank with room cleans in the
foreground step by step until one has: `foreground` counts those steps, and a write among them
has no bound (a whole block may have to be cleaned first).

RFTL (`--ftl rftl` on `k9-003`, paper 004's part, 64 MiB exported) gets the same three rows
with its own bound, `ftl.rt.write_bound_us` (T_erase + transfer + T_prog: one step of its
partial GC, then the page): in virtual time every write is within it by construction, so its
rows show what real time and the NBD transport add. Its NBD row also opens on jobs the close
left under way (a clean open takes them back).

Each run: `--precondition 95` (fill, then random overwrites until GC is in steady state — it
ends with every bank at its GC reserve, as after a burst), then the writes, back to back.
The first 2 s are left out of the steady-state figures (background GC restoring its floor
after the burst); `max all` includes them. Virtual time (deterministic) and real time (the
emulated device on the host's clock: adds this machine's scheduling noise; 2 vCPUs).

Timing `nbd`: the same device served (`ftld serve --timing real`, NBD on a unix socket) after
the same precondition (`ftld replay --image` in virtual time), and the FUA writes sent by
libnbd (`nbdsh`, Debian python3-libnbd: the client library fio's nbd engine uses; fio itself
has no FUA writes over NBD), one at a time. The latency columns are then the client's
(request sent to reply received: the transport is included), `server p99.9 us` and `server
max us` are the daemon's own (`ftld stats` latency_write, request start to completion, every
write since the open). For the replay rows those two are the in-process figures again. Like the
real-time replay (which also preconditions, closes and reopens), the open is a clean one: it
resumes the blocks the close left partly programmed as write frontiers, and cleans only a bank
that got none back to its soft floor (before 2026-11-30 it cleaned every bank, so the first
~2 s of writes of `default` needed no GC); the first 2 s are the warm-up the steady-state
figures leave out; `steps / write` and `WAF` count from the first write.

Host stalls (real time and NBD): on a virtual machine the hypervisor sometimes stops a vCPU
for milliseconds (`ftld stalls` on this 2-vCPU guest, idle: 2.5 ms in 5 s; `cyclictest` saw
16 ms under load), and a write in flight then is late by that much whatever the FTL does. A
stall probe runs beside those rows (`ftld replay --stall-probe`, or `ftld stalls` beside the
NBD client: a thread per CPU waking every millisecond; a wake-up over 200 us late is a stall).
`host stall us` is the longest stall of the steady-state window, `stalled writes` the
steady-state writes whose own window (sent to completed) overlaps a stall on any CPU, and
`max calm us` / `calm / bound` the max of the others: the FTL's and emulator's own worst case.
"""

import json
import os
import signal
import subprocess
import sys
import time

import common

# Left out of the steady-state figures: background GC restoring its floor after the
# precondition's burst. The quick run is too short for 2 s: a quarter second there.
WARMUP_US = 2_000_000
# The stall probe's period (`ftld stalls`, `ftld replay --stall-probe`: 1 ms).
PROBE_PERIOD_US = 1000.0
QUICK_WARMUP_US = 250_000


def preset_timing(ftld, name):
    """(t_read, t_prog, t_erase, transfer of a page) in us and the page size, from `ftld presets --json` (the
    slowest page type's read and program for a multi-level cell: a bound must hold for all)."""
    out = subprocess.run([ftld, "presets", "--json"], capture_output=True, text=True,
                         check=True).stdout
    for p in json.loads(out):
        if p["name"] == name:
            g, t = p["config"]["geometry"], p["config"]["timing"]
            cell = t.get("cell", {})
            t_read = max([t["t_read_us"], *cell.get("t_read_upper_us", [])])
            t_prog = max([t["t_prog_us"], *cell.get("t_prog_upper_us", [])])
            xfer = g["page_size"] / t["channel_bytes_per_sec"] * 1e6
            return t_read, t_prog, t["t_erase_us"], xfer, g["page_size"]
    raise SystemExit(f"preset {name} not in `ftld presets`")


# Sent through nbdsh (`h` is its connected handle): N FUA writes of 4 KiB at random pages,
# one at a time; writes {"origin_ns": CLOCK_MONOTONIC of the first, "writes": [(start us since
# the first, latency us)]} as JSON to OUT.
NBDSH_WRITES = """
import json, os, random, time
import nbd
n, out = int(os.environ["GC_BOUND_N"]), os.environ["GC_BOUND_OUT"]
assert h.can_fua(), "the server does not offer FUA"
pages = h.get_size() // 4096
rng = random.Random(1)
buf = bytearray(4096)
lat = []
t0 = time.monotonic_ns()
for i in range(n):
    off = rng.randrange(pages) * 4096
    buf[0:8] = i.to_bytes(8, "little")
    s = time.monotonic_ns()
    h.pwrite(bytes(buf), off, nbd.CMD_FLAG_FUA)
    lat.append(((s - t0) / 1000, (time.monotonic_ns() - s) / 1000))
with open(out, "w") as f:
    json.dump({"origin_ns": t0, "writes": lat}, f)
"""


def served(a, preset, policy, capacity, n, scheme="page"):
    """The NBD run: precondition an image in virtual time, serve it with timing real, send `n`
    FUA writes through nbdsh. Returns ([(start us, latency us)], `ftld stats` JSON, the GC
    counters' deltas, [(stall start us, length us)] on the writes' clock). `policy` is the
    page scheme's GC policy (None for another scheme)."""
    # nbdsh is `python3 -m nbd` with `python3` from PATH, which may not be the Python the
    # bindings were built for (a pyenv one): run it with one that can import them.
    python = next((p for p in (sys.executable, "/usr/bin/python3") if subprocess.run(
        [p, "-c", "import nbd"], capture_output=True).returncode == 0), None)
    if python is None:
        raise SystemExit("gc_bound: nbdsh and libnbd's Python bindings are needed for the "
                         "NBD rows (Debian package python3-libnbd)")
    tag = f"{preset}-{policy or scheme}-nbd"
    run_dir = a.out / "runs" / tag
    run_dir.mkdir(parents=True)
    image = run_dir / "device.img"
    common.replay(a, f"{tag}-precondition", [
        "--image", image, "--preset", preset, "--capacity", capacity, "--ftl", scheme,
        *scheme_options(policy), "--precondition", 95, "--seed", 1, "--queue-depth", 1,
        "--workload", "random,bs=4k,read=0,requests=1"])
    cfg = run_dir / "ftld.toml"
    cfg.write_text(f'[ftl]\ngc_policy = "{policy}"\n' if policy else "")
    sock, ctl = run_dir / "nbd.sock", run_dir / "ctl.sock"
    log = open(run_dir / "serve.log", "w")
    server = subprocess.Popen(
        [a.ftld, "serve", "--image", str(image), "--config", str(cfg), "--timing", "real",
         "--frontend", "nbd", "--nbd-socket", str(sock), "--control-socket", str(ctl)],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (sock.exists() and ctl.exists()):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"gc_bound: ftld serve did not listen; see {run_dir}/serve.log")
            time.sleep(0.05)
        out = run_dir / "latencies.json"
        env = dict(os.environ, GC_BOUND_N=str(n), GC_BOUND_OUT=str(out))
        before = ftld_stats(a, ctl)
        t = time.monotonic()
        stalls_csv = run_dir / "stalls.csv"
        probe = subprocess.Popen([a.ftld, "stalls", "--seconds", "7200", "--csv", str(stalls_csv)],
                                 stdout=subprocess.DEVNULL)
        try:
            # A write takes milliseconds: an hour is a hung server, not a slow one.
            subprocess.run([python, "-m", "nbd", "-u", f"nbd+unix:///?socket={sock}", "-c",
                            NBDSH_WRITES], env=env, check=True, timeout=3600)
        finally:
            probe.send_signal(signal.SIGINT)
            probe.wait(timeout=60)
        after = ftld_stats(a, ctl)
        (run_dir / "stats.json").write_text(json.dumps(after, indent=1))
        with open(out) as f:
            client = json.load(f)
        lat = client["writes"]
        # The probe's stalls on the client's clock (both CLOCK_MONOTONIC): us since its first write.
        stalls = []
        with open(stalls_csv) as f:
            next(f)
            for line in f:
                start_ns, _, length_us = line.rstrip("\n").split(",")
                stalls.append(((int(start_ns) - client["origin_ns"]) / 1000, float(length_us)))
        print(f"  {tag}: {n} FUA writes over NBD in {time.monotonic() - t:.1f} s",
              file=sys.stderr)
        # GC and WAF of the writes alone: the open's own cleaning (`restore_headroom`) is
        # before them.
        b, f = before["ftl"], after["ftl"]
        delta = {k: f[k] - b[k] for k in ("gc_steps", "foreground_gc", "nand_page_programs",
                                           "gc_page_programs", "host_write_bytes")}
        return lat, f, delta, stalls
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        # The aged image (as large as the device's flash) has served its purpose: the figures
        # are in stats.json and latencies.json.
        image.unlink(missing_ok=True)


def scheme_options(policy):
    """`ftld replay` options for the page scheme's GC `policy` (None: another scheme's own)."""
    return ["--gc-policy", policy] if policy else []


def ftld_stats(a, ctl):
    return json.loads(subprocess.run(
        [a.ftld, "stats", "--control-socket", str(ctl)], capture_output=True, text=True,
        check=True).stdout)


def stall_columns(timed, stalls, warmup, bound):
    """The host-stall columns of a real-time row: `timed` [(start us, latency us)] of every
    write, `stalls` [(start us, length us)] on the same clock."""
    steady = [(s, l) for s, l in timed if s >= warmup]
    t0 = steady[0][0] if steady else 0.0
    t1 = max((s + l for s, l in steady), default=0.0)
    in_window = [length for start, length in stalls if start + length > t0 and start < t1]
    # A stall is known by the wake-up it delayed (due at `start`), but the CPU may have stopped
    # up to a period (1 ms) earlier: a write is counted as stalled from then.
    early = [(start - PROBE_PERIOD_US, length + PROBE_PERIOD_US) for start, length in stalls]

    def stalled(s, l):
        return any(start < s + l and start + length > s for start, length in early)

    calm = [l for s, l in steady if not stalled(s, l)]
    return {
        "host stall us": max(in_window, default=0.0),
        "stalled writes": len(steady) - len(calm),
        "max calm us": max(calm) if calm else None,
        "calm / bound": max(calm) / bound if calm else None,
    }


def read_stalls(run_dir):
    """[(start us, length us)] from a replay's stalls.csv."""
    with open(run_dir / "stalls.csv") as f:
        next(f)
        return [(float(start), float(length)) for start, _, length in
                (line.rstrip("\n").split(",") for line in f)]


def tail_columns(lat, bound):
    """p99, p99.9 and max of the sorted steady-state latencies `lat`, and max / bound."""
    return {
        "p99 us": pct(lat, 99), "p99.9 us": pct(lat, 99.9),
        "max us": lat[-1] if lat else None,
        "max / bound": lat[-1] / bound if lat else None,
    }


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    return sorted_vals[min(len(sorted_vals) - 1, int(p / 100 * len(sorted_vals)))]


def row(a, preset, scheme, policy, capacity, timing, page, warmup, bounds):
    """One row: `n` FUA writes at QD 1 after a precondition to 95 %, with `timing` virtual,
    real (both `ftld replay`) or nbd (`served`). `bounds(rt)` gives (bound, one-step) from the
    run's `ftl.rt` statistics (None for a scheme without them)."""
    name = policy or scheme
    if timing == "nbd":
        n = 1_500 if a.quick else 20_000
        timed, ftl, d, stalls = served(a, preset, policy, capacity, n, scheme)
        bound, one_step = bounds(ftl.get("rt"))
        lat = sorted(l for start, l in timed if start >= warmup)
        programs = d["nand_page_programs"] + d["gc_page_programs"]
        secs = sum(timed[-1]) / 1e6 if timed else 0
        return {
            "preset": preset, "policy": name, "timing": timing,
            "IOPS": len(timed) / secs if secs > 0 else 0.0,
            "bound us": bound, "one-step us": one_step,
            **tail_columns(lat, bound),
            "max all us": max(l for _, l in timed),
            "server p99.9 us": ftl["latency_write"]["p999_us"],
            "server max us": ftl["latency_write"]["max_us"],
            **stall_columns(timed, stalls, warmup, bound),
            "steps / write": d["gc_steps"] / max(1, n),
            "foreground": d["foreground_gc"],
            "WAF": programs * page / max(1, d["host_write_bytes"]),
        }
    if timing == "real":
        n = 1_500 if a.quick else 20_000
    else:
        n = 6_000 if a.quick else 100_000
    tag = f"{preset}-{name}-{timing}"
    probe = ["--stall-probe"] if timing == "real" else []
    s, run_dir = common.replay(a, tag, [
        "--preset", preset, "--capacity", capacity, "--ftl", scheme, *scheme_options(policy),
        "--timing", timing, "--precondition", 95, "--seed", 1, "--queue-depth", 1, *probe,
        "--workload", f"random,bs=4k,read=0,fua=1,requests={n}"])
    timed = []
    with open(run_dir / "requests.csv") as f:
        next(f)
        for line in f:
            arrival, op, _, _, latency = line.rstrip("\n").split(",")
            if op == "write":
                timed.append((float(arrival), float(latency)))
    gc = s["gc"]
    bound, one_step = bounds(gc.get("rt"))
    lat = sorted(l for start, l in timed if start >= warmup)
    # Virtual time has no host to stall it.
    stalls = (stall_columns(timed, read_stalls(run_dir), warmup, bound)
              if timing == "real" else
              dict.fromkeys(("host stall us", "stalled writes", "max calm us",
                             "calm / bound"), "-"))
    return {
        "preset": preset, "policy": name, "timing": timing,
        "IOPS": s["write"]["count"] / s["simulated_seconds"],
        "bound us": bound, "one-step us": one_step,
        **tail_columns(lat, bound),
        "max all us": s["write"]["max_us"],
        "server p99.9 us": pct(lat, 99.9),
        "server max us": lat[-1] if lat else None,
        **stalls,
        "steps / write": gc["steps"] / max(1, s["write"]["count"]),
        "foreground": gc["foreground"],
        "WAF": s["waf"],
    }


def main():
    a = common.parse_args("gc_bound", __doc__)
    warmup = QUICK_WARMUP_US if a.quick else WARMUP_US
    rows = []
    for preset in ("default", "slc-small-004"):
        t_read, t_prog, t_erase, xfer, page = preset_timing(a.ftld, preset)
        own = xfer + t_prog
        copy = max(t_read + t_prog, t_read + 2 * xfer + t_prog)
        one_step = own + t_erase + copy
        bound = own + t_erase + 8 * copy
        capacity = "64M" if a.quick else "256M"
        for policy in ("adaptive", "in-path"):
            for timing in ("virtual", "real", "nbd"):
                rows.append(row(a, preset, "page", policy, capacity, timing, page, warmup,
                                lambda _: (bound, one_step)))
    # RFTL (paper 004) on its own part: its bound is one step (an erase, or the copies that fit
    # in one) then the page's program, as `ftl.rt.write_bound_us` computes it.
    capacity = "32M" if a.quick else "64M"
    page = preset_timing(a.ftld, "k9-003")[4]
    for timing in ("virtual", "real", "nbd"):
        rows.append(row(a, "k9-003", "rftl", None, capacity, timing, page, warmup,
                        lambda rt: (rt["write_bound_us"], rt["write_bound_us"])))
    common.write_table(
        a, "FUA write latency at 95 % fill against the per-write GC bound",
        ["preset", "policy", "timing", "IOPS", "bound us", "one-step us", "p99 us", "p99.9 us", "max us",
         "max / bound", "max all us", "server p99.9 us", "server max us", "host stall us",
         "stalled writes", "max calm us", "calm / bound", "steps / write", "foreground", "WAF"],
        rows,
        f"Steady state (arrivals after {warmup / 1e6:g} s). Goal (issue 14): max / bound <= 1; "
        "real-time figures also hold this machine's scheduling delays: `calm` leaves out the "
        "writes during which the host stalled a CPU (stall probe, see the script's doc).")


if __name__ == "__main__":
    main()
