#!/usr/bin/env python3
"""LFTL (paper 001) Table 4: the time to bring a 512 GB card up, by how the FTL finds its
state: a parallel page-level scan (after a failure: ~30 min), a linear or parallel block-level
scan for the checkpoint (~2 min, ~28 s), and LFTL's bounded parallel scan of a few blocks per
bank for the first checkpoint block (~2-3 s).

Stand-in: an `lftl-card` image, filled and aged (`--precondition 100`), opened three ways, each
open's NAND time read from the next replay's `config.open`: `scan` is the scan alone (every
bank reading its pages in parallel), `open` the whole open on the simulated clock from 0
(checkpoint reads, the scan, the checkpoint a recovery writes, and the GC an open does when a
bank has no free block for its writers):
- no usable checkpoint: the image made with periodic checkpoints off, ended by a power cut
  (`--power-cut`), so the open scans every programmed page, as LFTL after a failure;
- after a power cut with checkpoints every 1 GiB written (the default): the newest checkpoint
  plus a scan of what was programmed after it;
- clean: a checkpoint written at close, found through the superblock (nothing scanned); the
  second clean open is shown (the first after aging also cleans ahead for the writers).
The figures scale with the programmed pages; the "at 512 GiB" column multiplies them out.
Full run: 8 GiB; --quick: 256 MiB.
"""

import shutil

import common


def open_of(a, name, image, extra=()):
    s, _ = common.replay(a, name, ["--image", image, *extra, "--workload", "random,requests=1"])
    return s["config"]["open"]


def main():
    a = common.parse_args("lftl_table4", __doc__)
    cap, gib = ("256M", 0.25) if a.quick else ("8G", 8.0)
    scale = 512 / gib
    img = a.out / "images"
    img.mkdir()
    no_ckpt = a.out / "no-checkpoints.toml"
    no_ckpt.write_text("[ftl]\ncheckpoint_interval_bytes = 4611686018427387904\n")
    age = ["--preset", "lftl-card", "--capacity", cap, "--precondition", 100]
    try:
        rows = measure(a, img, no_ckpt, age, scale)
    finally:
        # The aged images hold a full device's data each (GiB): not results.
        shutil.rmtree(img, ignore_errors=True)
    f, c = rows[0]["ftld open s"], rows[2]["ftld open s"]
    common.write_table(
        a, f"LFTL Table 4: bringing the device up ({cap} lftl-card, aged)",
        ["open", "paper (512 GB)", "ftld mode", "ftld pages scanned", "ftld scan s",
         "ftld open s", "ftld open at 512 GiB, s", "ftld wall ms"], rows,
        f"Full scan / clean open: ftld {f / c:.0f}x (paper ~30 min / ~2.5 s = ~720x).")


def measure(a, img, no_ckpt, age, scale):
    """The three opens' rows."""
    rows = []

    def row(how, paper, o):
        rows.append({
            "open": how,
            "paper (512 GB)": paper,
            "ftld mode": o["mode"],
            "ftld pages scanned": o["pages_scanned"],
            "ftld scan s": o["scan_simulated_ms"] / 1e3,
            "ftld open s": o["simulated_ms"] / 1e3,
            "ftld open at 512 GiB, s": o["simulated_ms"] / 1e3 * scale,
            "ftld wall ms": o["wall_ms"],
        })

    full = str(img / "full-scan.img")
    common.replay(a, "age-no-checkpoints", [
        "--image", full, "--config", no_ckpt, *age, "--workload", "random,requests=1",
        "--power-cut"])
    row("page-level scan (no usable checkpoint)", "~30 min", open_of(a, "open-full-scan", full))

    cut = str(img / "power-cut.img")
    ckpt = []
    if a.quick:
        # The default interval (1 GiB written) is an eighth of the full run's device; a
        # reduced device ages without reaching it, and the roll-forward row would be the full
        # scan's again. The same proportion: an eighth of 256 MiB.
        every = a.out / "checkpoint-every-32m.toml"
        every.write_text("[ftl]\ncheckpoint_interval_bytes = 33554432\n")
        ckpt = ["--config", every]
    common.replay(a, "age", ["--image", cut, *ckpt, *age, "--workload", "random,requests=1",
                             "--power-cut"])
    row("checkpoint + roll-forward after a power cut", "- (LFTL scans pages)",
        open_of(a, "open-roll-forward", cut))
    open_of(a, "open-clean-1", cut)
    row("clean: checkpoint through the superblock", "~2-3 s (bounded parallel scan)",
        open_of(a, "open-clean-2", cut))
    return rows


if __name__ == "__main__":
    main()
