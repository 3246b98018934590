#!/usr/bin/env python3
"""Hot/cold separation and where GC puts the data it moves: a reference for `[ftl] separation`.

Model: one pool of BLOCKS_LOGICAL * (1 + SPARE) blocks of PAGES pages; LPNS = BLOCKS_LOGICAL *
PAGES logical pages, a fraction HOT of them (the lowest) taking a share HOT_WRITES of the host
writes, uniformly within each set. The device is filled in order, then overwritten 12 times
its size; WAF is measured over the second half. GC keeps MIN_FREE blocks free and picks a
victim among the full blocks by greedy (fewest valid pages) or cost-benefit (age x (1 - u) /
2u, age since the block's last program). The classifier is perfect (a page is hot if it is in
the hot set): the figures bound what a recency test can get.

Placements compared (a "stream" is an open block that takes pages in turn):
- mixed: one host stream, GC into its own stream (no separation);
- separated, one GC stream: host pages to a hot or a cold stream, GC-moved pages to a third
  (ftld before 2026-11-28: GC-moved data kept apart from host data);
- separated, GC by temperature: GC-moved pages to a hot or a cold GC stream (ftld now);
- separated, GC into the host streams: GC-moved pages join the host stream of their temperature.

Usage: benches/sim/hotcold_gc.py [--spare 0.125] [--hot 0.2] [--hot-writes 0.8]
    [--blocks 512] [--pages 64] [--seed 1]
Prints one line per placement and victim policy. Pure Python: ~20 s per line at the defaults.
"""
import argparse
import random


def run(placement, victims, blocks, pages, spare, hot, hot_writes, seed, min_free=3):
    rng = random.Random(seed)
    lpns = blocks * pages
    nblocks = int(blocks * (1 + spare))
    valid = [0] * nblocks
    content = [[] for _ in range(nblocks)]  # LPNs programmed into the block, maybe stale
    filled = [0] * nblocks  # programs so far when the block was last programmed
    where = [-1] * lpns
    free = list(range(nblocks))
    streams = {}
    hot_lpns = int(lpns * hot)
    programs = 0

    def stream(lpn, by_gc):
        temp = "hot" if lpn < hot_lpns else "cold"
        if placement == "mixed":
            return "gc" if by_gc else "host"
        if not by_gc or placement == "gc-into-host":
            return temp
        return "gc-" + temp if placement == "gc-by-temperature" else "gc"

    def program(lpn, by_gc):
        nonlocal programs
        s = stream(lpn, by_gc)
        b = streams.get(s)
        if b is None or len(content[b]) >= pages:
            b = streams[s] = free.pop()
        if where[lpn] >= 0:
            valid[where[lpn]] -= 1
        content[b].append(lpn)
        valid[b] += 1
        where[lpn] = b
        programs += 1
        filled[b] = programs

    def score(b):
        if victims == "greedy":
            return -valid[b]
        u = valid[b] / pages
        return float("inf") if u == 0 else (programs - filled[b] + 1) * (1 - u) / (2 * u)

    def clean():
        open_blocks = set(streams.values())
        full = [b for b in range(nblocks) if content[b] and b not in open_blocks]
        v = max(full, key=score)
        for lpn in content[v]:
            if where[lpn] == v:
                program(lpn, True)
        content[v] = []
        valid[v] = 0
        free.insert(0, v)

    def host_write(lpn):
        while len(free) < min_free:
            clean()
        program(lpn, False)

    for lpn in range(lpns):
        host_write(lpn)
    total = 12 * lpns
    start = 0
    for i in range(total):
        if i == total // 2:
            start = programs
        if rng.random() < hot_writes:
            host_write(rng.randrange(hot_lpns))
        else:
            host_write(hot_lpns + rng.randrange(lpns - hot_lpns))
    return (programs - start) / (total - total // 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spare", type=float, default=0.125, help="spare factor (ftld's default 1G image: 0.125)")
    ap.add_argument("--hot", type=float, default=0.2, help="share of the logical pages that is hot")
    ap.add_argument("--hot-writes", type=float, default=0.8, help="share of the writes to hot pages")
    ap.add_argument("--blocks", type=int, default=512, help="logical blocks")
    ap.add_argument("--pages", type=int, default=64, help="pages per block")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    for victims in ("greedy", "cost-benefit"):
        for placement, what in [("mixed", "mixed, GC stream"),
                                ("gc-apart", "separated, one GC stream"),
                                ("gc-by-temperature", "separated, GC by temperature"),
                                ("gc-into-host", "separated, GC into host streams")]:
            waf = run(placement, victims, a.blocks, a.pages, a.spare, a.hot, a.hot_writes, a.seed)
            print(f"{victims:12} {what:32} WAF {waf:.3f}", flush=True)


if __name__ == "__main__":
    main()
