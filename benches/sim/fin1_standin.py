#!/usr/bin/env python3
"""A stand-in for UMass Financial 1 (5.3 M requests, UMass/SPC format), for replay-speed runs.

The UMass traces are not shipped here. This has Financial 1's shape: 77 % writes, sizes 512 B
to 16 KiB (most 4 KiB, many below: read-modify-writes), 24 ASUs, LBAs over ~400 MiB,
exponential inter-arrival times of mean 8.3 ms. Deterministic (seed 1).

    python3 benches/sim/fin1_standin.py /tmp/fin1_standin.spc [REQUESTS]
"""
import random
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "fin1_standin.spc"
n = int(float(sys.argv[2])) if len(sys.argv) > 2 else 5_300_000
r = random.Random(1)
sizes = [512, 1024, 2048, 3072, 4096, 4096, 4096, 8192, 16384]
with open(out, "w") as f:
    t = 0.0
    for _ in range(n):
        t += r.expovariate(1 / 0.0083)
        op = "w" if r.random() < 0.77 else "r"
        asu = r.randrange(24)
        lba = r.randrange(0, 700_000) if r.random() < 0.8 else r.randrange(0, 800_000)
        f.write(f"{asu},{lba},{r.choice(sizes)},{op},{t:.6f}\n")
