#!/usr/bin/env python3
"""Sung's thesis (paper 003) Table 3 and Fig. 16: merge counts (switch, partial, full) and total
response time of a hybrid FTL, log blocks placed on their data block's bank (`--log-placement
same`) vs spread to another channel and bank (`spread`, the thesis's method), with a
controller per channel (TMCD) and with 4 controllers that reach any bank (PMCD).

The six traces (Financial 1/2, MSNFS, PCMark, AS SSD, WindowsPC) are not shipped; stand-ins
keep each trace's share of read requests and mean request size (thesis Table 2; read shares by
request count: 23/82/67/76/17/55 %) with a hot/cold address pattern (80 % of requests to 20 %
of the space; AS SSD's copy test sequential), arriving open loop (Poisson) at 100 requests/s
(Financial 1's average rate is 122/s; the others' are not stated), writes FUA (the thesis's
simulated SSD has no write cache; a request waits for its flash operations),
on the `k9-003` preset (the thesis's NAND timing: 25/200/1500 us, 50 us transfer; 4 channels x
4 banks instead of 4 buses x 2 chips x 2 dies x 4 planes) with FAST (full merges of several
blocks, as the thesis's Table 3 shows), 80 % preconditioned. Virtual time.

Paper: merge counts are the same with and without the method (placement changes where, not
whether, merges happen); total response time up to 5.52 % lower with it (Fig. 16; per-trace
figures not stated).
"""

import common

# name: (bs, read %, pattern)
TRACES = {
    "Financial 1": ("4k", 23, "hotcold"),
    "Financial 2": ("4k", 82, "hotcold"),
    "MSNFS": ("12k", 67, "hotcold"),
    "PCMark": ("64k", 76, "hotcold"),
    "AS SSD": ("128k", 17, "seq"),
    "WindowsPC": ("16k", 55, "hotcold"),
}


def total_response_s(s):
    return sum(s[op]["mean_us"] * s[op]["count"] for op in ("read", "write")) / 1e6


def main():
    a = common.parse_args("thesis_table3", __doc__)
    n_req = 3000 if a.quick else 60000
    rows = []
    for name, (bs, read, kind) in TRACES.items():
        spec = f"{kind},bs={bs},read={read},requests={n_req},iops=100,arrival=poisson,fua=1"
        if kind == "hotcold":
            spec += ",hot=80/20"
        r = {"trace (stand-in)": name}
        for ic in ("tmcd", "pmcd"):
            for place in ("same", "spread"):
                tag = f"{name.replace(' ', '')}-{ic}-{place}"
                s, _ = common.replay(a, tag, [
                    "--preset", "k9-003", "--ftl", "fast", "--interconnect", ic,
                    "--log-placement", place, "--precondition", 80, "--seed", 1,
                    "--workload", spec])
                m = s["gc"]["merges"]
                r[f"{ic} {place} s"] = total_response_s(s)
                if ic == "tmcd" and place == "spread":
                    r["switch"], r["partial"], r["full"] = m["switch"], m["partial"], m["full"]
                    r["erases"] = s["gc"]["erases"]
                r[f"{ic} {place} merges"] = m["switch"] + m["partial"] + m["full"]
        for ic in ("tmcd", "pmcd"):
            same, spread = r[f"{ic} same s"], r[f"{ic} spread s"]
            r[f"{ic} saved"] = f"{(1 - spread / same) * 100:+.2f} %" if same else "-"
        rows.append(r)
    common.write_table(
        a, "Thesis Table 3: merges of the stand-in traces (FAST, TMCD, spread placement)",
        ["trace (stand-in)", "switch", "partial", "full", "erases", "tmcd same merges",
         "tmcd spread merges", "pmcd same merges", "pmcd spread merges"], rows)
    common.write_table(
        a, "Thesis Fig. 16: total response time, same vs spread log placement",
        ["trace (stand-in)", "tmcd same s", "tmcd spread s", "tmcd saved", "pmcd same s",
         "pmcd spread s", "pmcd saved"], rows,
        "Paper: up to 5.52 % saved by spreading (Fig. 16); `saved` > 0 means spread is faster.")


if __name__ == "__main__":
    main()
