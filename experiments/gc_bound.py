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

Each run: `--precondition 95` (fill, then random overwrites until GC is in steady state — it
ends with every bank at its GC reserve, as after a burst), then the writes, back to back.
The first 2 s are left out of the steady-state figures (background GC restoring its floor
after the burst); `max all` includes them. Virtual time (deterministic) and real time (the
emulated device on the host's clock: adds this machine's scheduling noise; 2 vCPUs).
"""

import json
import subprocess

import common

# Left out of the steady-state figures: background GC restoring its floor after the
# precondition's burst. The quick run is too short for 2 s: a quarter second there.
WARMUP_US = 2_000_000
QUICK_WARMUP_US = 250_000


def preset_timing(ftld, name):
    """(t_read, t_prog, t_erase, transfer of a page) in us, from `ftld presets --json` (the
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
            return t_read, t_prog, t["t_erase_us"], xfer
    raise SystemExit(f"preset {name} not in `ftld presets`")


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    return sorted_vals[min(len(sorted_vals) - 1, int(p / 100 * len(sorted_vals)))]


def main():
    a = common.parse_args("gc_bound", __doc__)
    warmup = QUICK_WARMUP_US if a.quick else WARMUP_US
    rows = []
    for preset in ("default", "slc-small-004"):
        t_read, t_prog, t_erase, xfer = preset_timing(a.ftld, preset)
        own = xfer + t_prog
        copy = max(t_read + t_prog, t_read + 2 * xfer + t_prog)
        one_step = own + t_erase + copy
        bound = own + t_erase + 8 * copy
        for policy in ("adaptive", "in-path"):
            for timing in ("virtual", "real"):
                if timing == "real":
                    n = 1_500 if a.quick else 20_000
                else:
                    n = 6_000 if a.quick else 100_000
                tag = f"{preset}-{policy}-{timing}"
                s, run_dir = common.replay(a, tag, [
                    "--preset", preset, "--capacity", "64M" if a.quick else "256M",
                    "--gc-policy", policy, "--timing", timing, "--precondition", 95,
                    "--seed", 1, "--queue-depth", 1, "--workload",
                    f"random,bs=4k,read=0,fua=1,requests={n}"])
                lat = []
                with open(run_dir / "requests.csv") as f:
                    next(f)
                    for line in f:
                        arrival, op, _, _, latency = line.rstrip("\n").split(",")
                        if op == "write" and float(arrival) >= warmup:
                            lat.append(float(latency))
                lat.sort()
                gc = s["gc"]
                rows.append({
                    "preset": preset, "policy": policy, "timing": timing,
                    "IOPS": s["write"]["count"] / s["simulated_seconds"],
                    "bound us": bound, "one-step us": one_step,
                    "p99 us": pct(lat, 99), "p99.9 us": pct(lat, 99.9),
                    "max us": lat[-1] if lat else None,
                    "max / bound": lat[-1] / bound if lat else None,
                    "max all us": s["write"]["max_us"],
                    "steps / write": gc["steps"] / max(1, s["write"]["count"]),
                    "foreground": gc["foreground"],
                    "WAF": s["waf"],
                })
    common.write_table(
        a, "FUA write latency at 95 % fill against the per-write GC bound",
        ["preset", "policy", "timing", "IOPS", "bound us", "one-step us", "p99 us", "p99.9 us", "max us",
         "max / bound", "max all us", "steps / write", "foreground", "WAF"], rows,
        f"Steady state (arrivals after {warmup / 1e6:g} s). Goal (issue 14): max / bound <= 1; "
        "real-time figures also hold this machine's scheduling delays.")


if __name__ == "__main__":
    main()
