#!/usr/bin/env python3
"""LFTL (paper 001) Table 2: read and write MB/s with 1, 2, 4, 8, 16 FTL queues on lftl-card.

The paper does not state the request size, tool or data size of Table 2. Stand-in: one
application stream per queue (closed loop, `--queue-depth` = `--queues`), each stream
synchronous as LFTL's per-queue worker is: 32 KiB (one NAND page) writes with FUA, so a write
completes when its page is programmed, then 4 KiB random reads of what was written. Virtual
time on the `lftl-card` preset (4 channels x 4 banks of 32 KiB-page SLC; the paper's card has
4 x 16 banks). Also reported: buffered writes (acknowledged from ftld's write buffer), which
reach the channels' limit with any number of queues (a flush at the end: the data is on flash).
"""

import common

PAPER = {1: (53, 45), 2: (99, 91), 4: (163, 170), 8: (210, 282), 16: (223, 364)}


def main():
    a = common.parse_args("lftl_table2", __doc__)
    mib = 8 if a.quick else 256
    rows = []
    for q in (1, 2, 4, 8, 16):
        img = ["--preset", "lftl-card", "--queues", q, "--queue-depth", q, "--seed", 1]
        writes = mib * 32  # 32 KiB each
        w, _ = common.replay(a, f"q{q}-write-fua", img + [
            "--workload", f"seq,bs=32k,requests={writes},fua=1"])
        b, _ = common.replay(a, f"q{q}-write-buffered", img + [
            "--workload", f"seq,bs=32k,requests={writes},flush_every={writes}"])
        reads = mib * 256  # 4 KiB each, over a filled span
        r, _ = common.replay(a, f"q{q}-read", img + [
            "--precondition", 50, "--workload",
            f"random,bs=4k,read=100,span=50%,requests={reads}"])
        rows.append({
            "queues": q,
            "paper read MB/s": PAPER[q][0],
            "ftld read MB/s": common.mb_per_s(r, "read"),
            "paper write MB/s": PAPER[q][1],
            "ftld write MB/s (FUA)": common.mb_per_s(w, "write"),
            "ftld write MB/s (buffered)": common.mb_per_s(b, "write"),
        })
    base = rows[0]
    for r in rows:
        r["write x (FUA)"] = r["ftld write MB/s (FUA)"] / base["ftld write MB/s (FUA)"]
        r["paper write x"] = r["paper write MB/s"] / base["paper write MB/s"]
    common.write_table(a, "LFTL Table 2: MB/s vs FTL queues (lftl-card, virtual time)", [
        "queues", "paper read MB/s", "ftld read MB/s", "paper write MB/s",
        "ftld write MB/s (FUA)", "paper write x", "write x (FUA)",
        "ftld write MB/s (buffered)"], rows)


if __name__ == "__main__":
    main()
