#!/usr/bin/env python3
"""Write amplification of per-bank greedy GC under uniform random overwrites: a reference for
the WAF that `ftld stats` and benches/fio/run.sh report on a full device.

Model: BANKS banks of BLOCKS data blocks (blocks usable for host data: checkpoint areas and the
superblock excluded) of PAGES pages of 4 KiB; LPNS logical pages. Host pages go round-robin
over the banks into one open block per bank; a bank left with MIN_FREE free blocks cleans its
block with the fewest valid pages into its own GC block first. The device is filled
sequentially, overwritten at random WARM times, then WAF is measured over MEASURE writes.

Usage: benches/sim/greedy_waf.py [--blocks 145] [--warm 1200000] [--measure 300000]
The defaults are ftld's default preset at --capacity 1G (16 banks x 147 blocks, 2 of them per
bank reserved for checkpoints). Prints "WAF x.xx". Pure Python: ~10 s per million writes.
"""
import argparse
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--banks", type=int, default=16)
    ap.add_argument("--blocks", type=int, default=145, help="data blocks per bank")
    ap.add_argument("--pages", type=int, default=128, help="pages per block")
    ap.add_argument("--lpns", type=int, default=262144, help="logical 4 KiB pages")
    ap.add_argument("--min-free", type=int, default=2)
    ap.add_argument("--warm", type=int, default=1200000)
    ap.add_argument("--measure", type=int, default=300000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    nb, nblk, ppb = a.banks, a.blocks, a.pages
    if a.lpns >= nb * (nblk - a.min_free - 2) * ppb:
        raise SystemExit("not enough blocks for that many logical pages")
    valid = [[0] * nblk for _ in range(nb)]
    content = [[[] for _ in range(nblk)] for _ in range(nb)]  # LPNs programmed, maybe stale
    where = {}  # lpn -> (bank, block)
    free = [list(range(nblk)) for _ in range(nb)]
    open_blk = {False: [None] * nb, True: [None] * nb}  # host / GC open block per bank
    fill = {False: [0] * nb, True: [0] * nb}
    counts = {"programs": 0}

    def program(b, lpn, gc):
        if open_blk[gc][b] is None:
            open_blk[gc][b] = free[b].pop()
            fill[gc][b] = 0
        blk = open_blk[gc][b]
        content[b][blk].append(lpn)
        valid[b][blk] += 1
        where[lpn] = (b, blk)
        fill[gc][b] += 1
        counts["programs"] += 1
        if fill[gc][b] == ppb:
            open_blk[gc][b] = None

    def collect(b):
        busy = {open_blk[False][b], open_blk[True][b]} | set(free[b])
        victim = min((k for k in range(nblk) if k not in busy), key=lambda k: valid[b][k])
        seen = set()
        for lpn in content[b][victim]:
            if lpn not in seen and where.get(lpn) == (b, victim):
                seen.add(lpn)
                valid[b][victim] -= 1
                program(b, lpn, True)
        content[b][victim] = []
        valid[b][victim] = 0
        free[b].insert(0, victim)

    rr = [0]

    def write(lpn):
        if lpn in where:
            ob, oblk = where[lpn]
            valid[ob][oblk] -= 1
        b = rr[0]
        rr[0] = (b + 1) % nb
        while len(free[b]) <= a.min_free:
            collect(b)
        program(b, lpn, False)

    for lpn in range(a.lpns):
        write(lpn)
    for _ in range(a.warm):
        write(rng.randrange(a.lpns))
    counts["programs"] = 0
    for _ in range(a.measure):
        write(rng.randrange(a.lpns))
    print(f"WAF {counts['programs'] / a.measure:.2f}")


if __name__ == "__main__":
    main()
