"""Shared helpers of the experiment scripts: find (or build) ftld, run `ftld replay`, read its
outputs, and write the result table (markdown and JSON) beside the paper's numbers.

Every experiment script takes:
  --quick        a reduced run (seconds; what ./scripts/test runs) instead of the full one
  --ftld PATH    the ftld binary [default: $FTLD, else target/release/ftld, built if missing]
  --out DIR      where results go [default: experiments/results/<experiment>, the stored
                 full-size results; with --quick target/experiments-quick/<experiment>, so a
                 reduced run does not overwrite them]. Its earlier results are replaced; a
                 directory that holds anything else is refused (see MARKER), never emptied
Only the Python standard library is used (gc_bound.py also runs libnbd's nbdsh, Debian
python3-libnbd, as an NBD client).
"""

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Written into every output directory an experiment makes, naming the experiment: a later run
# of the same experiment may empty a directory that has it (or a default one, which only
# experiments write), and refuses any other non-empty directory, so `--out .` or `--out ~`
# never deletes a user's files, nor one experiment another's results.
MARKER = ".ftld-experiment"


def parse_args(name, description):
    p = argparse.ArgumentParser(prog=name, description=description)
    p.add_argument("--quick", action="store_true", help="a reduced run (seconds)")
    p.add_argument("--ftld", help="the ftld binary")
    p.add_argument("--out", help="output directory")
    a = p.parse_args()
    a.name = name
    a.ftld = find_ftld(a.ftld)
    given = a.out is not None
    if given:
        a.out = Path(a.out)
    elif a.quick:
        target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
        a.out = target / "experiments-quick" / name
        print(f"{name}: a reduced run: results in {a.out}", file=sys.stderr)
    else:
        a.out = ROOT / "experiments" / "results" / name
    prepare_out(a.out, given, name)
    return a


def prepare_out(out, given, name):
    """Makes `out` an empty directory for this run's results. An existing one is emptied only
    if this experiment wrote it (its MARKER names `name`, or it is a default location and
    `given` is false); any other non-empty path is refused with an error naming it."""
    if out.is_symlink():
        sys.exit(f"--out {out}: is a symbolic link; name the directory itself")
    if out.exists():
        if not out.is_dir():
            sys.exit(f"--out {out}: exists and is not a directory; name a new or empty directory")
        entries = sorted(e.name for e in out.iterdir())
        owner = (out / MARKER).read_text().strip() if MARKER in entries else None
        if entries and given and owner != name:
            if owner:
                why = f"it holds the results of {owner}"
            else:
                shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
                why = f"the directory holds files no experiment wrote ({shown})"
            sys.exit(
                f"--out {out}: {why}; name a new or empty directory (a rerun of {name} "
                f"replaces its own output, marked by {MARKER})"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text(f"{name}\n")


def find_ftld(given):
    if given:
        return str(Path(given).resolve())
    if os.environ.get("FTLD"):
        return os.environ["FTLD"]
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    exe = target / "release" / "ftld"
    if not exe.exists():
        print("building ftld (cargo build --release -p ftld) ...", file=sys.stderr)
        subprocess.run(["cargo", "build", "--release", "-p", "ftld"], cwd=ROOT, check=True)
    return str(exe)


class ReplayFailed(Exception):
    pass


def replay(args, run_name, options):
    """Runs `ftld replay OPTIONS --out OUT/runs/RUN_NAME`; returns (summary dict, run dir)."""
    run_dir = args.out / "runs" / run_name
    cmd = [args.ftld, "replay", *[str(o) for o in options], "--out", str(run_dir)]
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise ReplayFailed(f"{' '.join(cmd)}\nexit {p.returncode}\n{p.stderr}")
    with open(run_dir / "summary.json") as f:
        s = json.load(f)
    (run_dir / "command.txt").write_text(" ".join(cmd) + "\n")
    print(f"  {run_name}: {s['requests']} requests, {s['simulated_seconds']:.3f} s "
          f"simulated in {time.monotonic() - t:.1f} s", file=sys.stderr)
    return s, run_dir


def latencies(run_dir, op=None):
    """Latencies (us) from requests.csv, of one op or all."""
    out = []
    with open(run_dir / "requests.csv") as f:
        for row in csv.DictReader(f):
            if op is None or row["op"] == op:
                out.append(float(row["latency_us"]))
    return out


def mb_per_s(summary, op):
    """Bytes of `op` over the replay's simulated time, in MB/s (10^6 bytes)."""
    secs = summary["simulated_seconds"]
    return summary[op]["bytes"] / 1e6 / secs if secs > 0 else 0.0


def fmt(v):
    if isinstance(v, float):
        if v != v:  # NaN
            return "-"
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return "-" if v is None else str(v)


def write_table(args, title, columns, rows, notes=""):
    """Prints a markdown table and writes it (and rows as JSON) to OUT/results.{md,json}."""
    lines = [f"### {title}", ""]
    if args.quick:
        lines += ["*Reduced run (`--quick`): figures are not comparable with the paper's.*", ""]
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "|".join("---:" if i else "---" for i in range(len(columns))) + "|")
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c)) for c in columns) + " |")
    if notes:
        lines += ["", notes]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.out / "results.md", "a") as f:
        f.write(text + "\n")
    path = args.out / "results.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[title] = {"columns": columns, "rows": rows, "quick": args.quick}
    path.write_text(json.dumps(data, indent=2) + "\n")
