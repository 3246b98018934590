#!/usr/bin/env python3
"""LFTL (paper 001) Table 3: XFS over the FTL, tiobench with 16 threads, write and read MB/s.

The paper mounts XFS on its FTL and runs tiobench, 16 threads each writing 1 GB, then reading
it back: 42 MB/s write and 54 MB/s read through Linux's `mtd_blkdevs` (one request queue and
one thread for every request), 297 and 245 MB/s through its own multi-queued framework.

Here the same thing runs on the real kernel path: `ftld serve --preset lftl-card --timing real`,
NBD through `nbdfuse` (FUSE; this host kernel has no nbd module), a loop device on that file,
`mkfs.xfs`, a mount, and fio in tiobench's shape (16 jobs, sequential 4 KiB `write()`s to a
file each, `end_fsync`; then, after unmounting to drop the caches, the same files read).
Two configurations stand in for the paper's two frameworks:
  - "1 queue": `--queues 1` and one NBD connection (`nbdfuse -C 1`), requests handled one
    connection's worth at a time;
  - "16 queues": `--queues 16` and 16 connections (`nbdfuse -C 16`), each connection's writes
    through their own write queue and writer (LFTL's per-queue workers).
`nbdkit memory` (no device model: RAM behind the same NBD/FUSE/loop path) runs the same
workload in the same session: the host's path alone, for scale (it is not a ceiling: on this
VM its figures vary as much as ftld's).

The daemon records every request it receives (`ftld serve --record`, blkparse text). The
recorded write and read phases are then replayed in virtual time, closed loop with as many
streams as the run had connections, with the same queues: the write phase on a fresh
lftl-card image, the read phase on the image that replay left (mkfs's requests are not
replayed, so the few reads of its metadata find unmapped pages). That is what the
device model gives for the block stream XFS produced, without this host's FUSE and CPU costs
(the real-time figures on a 2-CPU VM are bound by those, not by the emulated flash). Phase
MB/s = the phase's bytes over the time from its first request's arrival to its last
completion.

Needs root, /dev/fuse, and nbdfuse (libnbd-bin), fusermount3 (fuse3), losetup (mount),
mkfs.xfs (xfsprogs), fio, nbdkit: `./scripts/test` installs them. Images live in /dev/shm.
"""

import csv
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

PAPER = {"mtd_blkdevs": (42, 54), "multi-queued": (297, 245)}
THREADS = 16
# Serialises with ./scripts/test's filesystem tests (loop devices and FUSE are machine-wide).
DEVICE_LOCK = "/tmp/ftld-e2e-devices.lock"
TOOLS = {"nbdfuse": "libnbd-bin", "fusermount3": "fuse3", "losetup": "mount",
         "mkfs.xfs": "xfsprogs", "fio": "fio", "nbdkit": "nbdkit", "mount": "mount"}


def tool(name):
    for d in os.environ.get("PATH", "").split(":") + ["/usr/sbin", "/sbin"]:
        p = Path(d) / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def check_host():
    missing = [f"{t} (Debian package {pkg})" for t, pkg in TOOLS.items() if not tool(t)]
    if missing:
        raise SystemExit("lftl_table3: not installed: " + ", ".join(missing)
                         + "; ./scripts/test installs them when run as root")
    if os.geteuid() != 0:
        raise SystemExit("lftl_table3: needs root (losetup, mount)")
    if not Path("/dev/fuse").exists():
        raise SystemExit("lftl_table3: /dev/fuse does not exist (nbdfuse needs FUSE)")


class Failed(RuntimeError):
    """A step failed; main() reports it (cleanup runs first and never hides it)."""


def run(cmd, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise Failed(f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return p.stdout


def try_run(*cmds):
    """Runs the first command; if it fails, the next, and so on (for undoing)."""
    for cmd in cmds:
        if subprocess.run([str(c) for c in cmd], capture_output=True).returncode == 0:
            return
    raise Failed(f"{' '.join(map(str, cmds[-1]))} failed")


def wait_for(path, proc, what, log, seconds=60):
    deadline = time.monotonic() + seconds
    while not Path(path).exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise Failed(f"{what} did not start; see {log}")
        time.sleep(0.05)


class Stack:
    """Undo actions run in reverse order, also on failure (server, FUSE, loop, mount)."""

    def __init__(self):
        self.undo = []

    def push(self, f):
        self.undo.append(f)

    def close_last(self):
        """Undoes the latest action now (it fails loudly: nothing else is pending on it)."""
        self.undo.pop()()

    def close(self):
        while self.undo:
            f = self.undo.pop()
            try:
                f()
            except BaseException as e:  # keep undoing the rest; the first error stands
                print(f"lftl_table3: cleanup: {e}", file=sys.stderr)


def stop(proc, sig=signal.SIGINT):
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def fio_phase(run_dir, rw, mnt, mib):
    """tiobench's shape: THREADS jobs, a file each, sequential 4 KiB `rw` (write or read);
    MB/s (10^6 B/s)."""
    out = run_dir / f"fio-{rw}.json"
    run(["fio", f"--name={rw}", f"--directory={mnt}", f"--numjobs={THREADS}", f"--rw={rw}",
         "--bs=4k", f"--size={mib}M", "--end_fsync=1", "--group_reporting",
         "--filename_format=tio.$jobnum", "--output-format=json", f"--output={out}"])
    return json.loads(out.read_text())["jobs"][0][rw]["bw_bytes"] / 1e6


def filesystem_run(run_dir, uri, conns, mib, on_phase=None):
    """mkfs.xfs on the export (via nbdfuse and a loop device), the write phase, a remount (cold
    caches), the read phase. Returns (write MB/s, read MB/s). `on_phase(phase)` is called before
    each phase."""
    st = Stack()
    try:
        fuse_dir = run_dir / "fuse"
        fuse_dir.mkdir()
        log = run_dir / "nbdfuse.log"
        fuse = subprocess.Popen([tool("nbdfuse"), "-C", str(conns), str(fuse_dir / "disk"), uri],
                                stdout=subprocess.DEVNULL, stderr=open(log, "w"))
        st.push(lambda: unmount_fuse(fuse_dir, fuse))
        wait_for(fuse_dir / "disk", fuse, "nbdfuse", log)
        # Direct I/O, so the loop device does not cache the export's pages itself (nbdfuse
        # passes O_DIRECT through): reads after a remount reach the device.
        dev = run(["losetup", "-f", "--show", "--direct-io=on", fuse_dir / "disk"]).strip()
        st.push(lambda: detach(dev))
        dio = Path(f"/sys/block/{Path(dev).name}/loop/dio").read_text().strip()
        if dio != "1":
            raise Failed(f"{dev} did not take --direct-io=on (dio={dio})")
        run(["mkfs.xfs", "-f", "-q", dev])
        mnt = run_dir / "mnt"
        mnt.mkdir()
        result = []
        for rw in ("write", "read"):
            if on_phase:
                on_phase(rw)
            # Nothing of the files cached from the phase before.
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
            run(["mount", dev, mnt])
            st.push(lambda: try_run(["umount", mnt], ["umount", "-l", mnt]))
            result.append(fio_phase(run_dir, rw, mnt, mib))
            st.close_last()
        return tuple(result)
    finally:
        st.close()


def unmount_fuse(fuse_dir, fuse):
    try:
        try_run(["fusermount3", "-u", fuse_dir], ["fusermount3", "-uz", fuse_dir])
    finally:
        stop(fuse, signal.SIGTERM)


def detach(dev):
    for _ in range(50):
        if subprocess.run(["losetup", "-d", dev], capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    raise Failed(f"losetup -d {dev} kept failing")


def phase_bounds(trace, markers):
    """Splits a recorded trace at the FTL clock's `markers` (seconds): list of line lists."""
    parts = [[] for _ in range(len(markers) + 1)]
    with open(trace) as f:
        for line in f:
            t = float(line.split()[3])
            i = sum(1 for m in markers if t >= m)
            parts[i].append(line)
    return parts


def phase_mb_s(run_dir, op):
    """Bytes of `op` over first arrival to last completion of any request, MB/s."""
    first, last, nbytes = None, 0.0, 0
    with open(run_dir / "requests.csv") as f:
        for r in csv.DictReader(f):
            a = float(r["arrival_us"])
            first = a if first is None else min(first, a)
            last = max(last, a + float(r["latency_us"]))
            if r["op"] == op:
                nbytes += int(r["length"])
    return nbytes / (last - first) if first is not None and last > first else 0.0


def ftl_clock(ctl, ftld):
    """The served FTL's clock in seconds (`ftld stats` `clock_secs`, the clock of `--record`)."""
    s = json.loads(run([ftld, "stats", "--control-socket", ctl]))
    return s["clock_secs"]


def synchronous_row(a, run_dir, work, capacity, buffered):
    """mtd_blkdevs' way (paper Fig. 3): one thread takes one request at a time and does it to
    the end under a device lock, so a write is on flash before the next request starts. The
    1-queue write phase replayed closed loop at depth 1 with every write made FUA (blkparse
    RWBS `W` -> `WF`); reads at depth 1 are the 1-queue row's already."""
    fua = run_dir / "write-fua.blk"
    with open(run_dir / "write.blk") as f, open(fua, "w") as out:
        for line in f:
            p = line.split()
            if len(p) > 6 and p[6] == "W":
                p[6] = "WF"
            out.write(" ".join(p) + "\n")
    s, d = common.replay(a, "q1-replay-write-fua", [
        fua, "--image", work / "replay-sync.img", "--preset", "lftl-card", "--capacity",
        capacity, "--queues", 1, "--queue-depth", 1])
    row = dict(buffered)
    row.update({
        "FTL framework": "1 queue, synchronous (a write on flash before the next request)",
        "paper": "mtd_blkdevs",
        "paper write MB/s": PAPER["mtd_blkdevs"][0],
        "paper read MB/s": PAPER["mtd_blkdevs"][1],
        "ftld write MB/s (real)": "-",
        "ftld read MB/s (real)": "-",
        "replay write MB/s (virtual)": phase_mb_s(d, "write"),
        "recorded requests": "-",
        "recorded MiB written": s["write"]["bytes"] / 2**20,
        "recorded MiB read": "-",
    })
    return row


def main():
    # Before parse_args, which clears the results directory.
    if not {"-h", "--help"} & set(sys.argv):
        check_host()
    a = common.parse_args("lftl_table3", __doc__)
    try:
        measure(a)
    except Failed as e:
        raise SystemExit(f"lftl_table3: {e}")


def measure(a):
    mib = 4 if a.quick else 64
    capacity = "512M" if a.quick else "2G"
    lock = open(DEVICE_LOCK, "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    rows = []
    work = Path(tempfile.mkdtemp(prefix="lftl_table3-", dir="/dev/shm"))
    try:
        for label, queues, paper in (("1 queue", 1, None), ("16 queues", 16, "multi-queued")):
            run_dir = a.out / "runs" / f"q{queues}"
            run_dir.mkdir(parents=True)
            image, sock, ctl = work / f"q{queues}.img", work / f"q{queues}.sock", work / "c.ctl"
            trace = run_dir / "served.blk"
            cmd = [a.ftld, "serve", "--image", image, "--preset", "lftl-card", "--capacity",
                   capacity, "--queues", queues, "--timing", "real", "--frontend", "nbd",
                   "--nbd-socket", sock, "--control-socket", ctl, "--record", trace]
            (run_dir / "command.txt").write_text(" ".join(map(str, cmd)) + "\n")
            log = run_dir / "serve.log"
            server = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL,
                                      stderr=open(log, "w"))
            marks = []
            try:
                wait_for(ctl, server, "ftld serve", log)
                w, r = filesystem_run(run_dir, f"nbd+unix:///?socket={sock}", queues, mib,
                                      lambda _: marks.append(ftl_clock(ctl, a.ftld)))
            finally:
                stop(server)
            if server.returncode != 0:
                raise Failed(f"ftld serve exited {server.returncode}; see {log}")
            if "request recording complete" not in log.read_text():
                raise Failed(f"the recording is incomplete (events dropped?); see {log}")
            # The trace before the write phase (mkfs), the write phase, the read phase.
            _, wlines, rlines = phase_bounds(trace, marks)
            (run_dir / "write.blk").write_text("".join(wlines))
            (run_dir / "read.blk").write_text("".join(rlines))
            replay_img = work / f"replay-q{queues}.img"
            opts = ["--image", replay_img, "--preset", "lftl-card", "--capacity", capacity,
                    "--queues", queues, "--queue-depth", queues]
            ws, wdir = common.replay(a, f"q{queues}-replay-write", [run_dir / "write.blk", *opts])
            rs, rdir = common.replay(a, f"q{queues}-replay-read", [run_dir / "read.blk", *opts])
            rows.append({
                "FTL framework": label,
                "paper": paper or "-",
                "paper write MB/s": PAPER[paper][0] if paper else None,
                "paper read MB/s": PAPER[paper][1] if paper else None,
                "ftld write MB/s (real)": w,
                "ftld read MB/s (real)": r,
                "replay write MB/s (virtual)": phase_mb_s(wdir, "write"),
                "replay read MB/s (virtual)": phase_mb_s(rdir, "read"),
                "recorded requests": ws["requests"] + rs["requests"],
                "recorded MiB written": ws["write"]["bytes"] / 2**20,
                "recorded MiB read": rs["read"]["bytes"] / 2**20,
                "mean write KiB": ws["write"]["bytes"] / 1024 / max(ws["write"]["count"], 1),
            })
            if queues == 1:
                rows.append(synchronous_row(a, run_dir, work, capacity, rows[-1]))
        # The host path's ceiling: RAM behind the same NBD, FUSE, loop and XFS.
        run_dir = a.out / "runs" / "nbdkit-memory"
        run_dir.mkdir(parents=True)
        sock = work / "nbdkit.sock"
        nbdkit = subprocess.Popen([tool("nbdkit"), "-f", "-U", str(sock), "memory", capacity],
                                  stdout=subprocess.DEVNULL,
                                  stderr=open(run_dir / "nbdkit.log", "w"))
        try:
            wait_for(sock, nbdkit, "nbdkit", run_dir / "nbdkit.log")
            w, r = filesystem_run(run_dir, f"nbd+unix:///?socket={sock}", THREADS, mib)
        finally:
            stop(nbdkit, signal.SIGTERM)
        rows.append({"FTL framework": "nbdkit memory (no device model)", "paper": "-",
                     "paper write MB/s": None, "paper read MB/s": None,
                     "ftld write MB/s (real)": w, "ftld read MB/s (real)": r,
                     "replay write MB/s (virtual)": "-", "replay read MB/s (virtual)": "-",
                     "recorded requests": "-", "recorded MiB written": "-",
                     "recorded MiB read": "-", "mean write KiB": "-"})
    finally:
        shutil.rmtree(work, ignore_errors=True)
        lock.close()
    common.write_table(a, f"LFTL Table 3: XFS, {THREADS} tiobench threads x {mib} MiB "
                          f"(lftl-card, {capacity})", [
        "FTL framework", "paper", "paper write MB/s", "paper read MB/s", "ftld write MB/s (real)",
        "ftld read MB/s (real)", "replay write MB/s (virtual)", "replay read MB/s (virtual)",
        "recorded requests", "recorded MiB written", "recorded MiB read", "mean write KiB"],
        rows,
        "Real: fio's bandwidth through nbdfuse, a loop device and XFS on this host. Virtual: "
        "the recorded phase replayed closed loop in virtual time (phase bytes over its span).")


if __name__ == "__main__":
    main()
