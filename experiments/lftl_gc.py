#!/usr/bin/env python3
"""LFTL (paper 001) Table 5 / Fig. 5 and Fig. 6: garbage collection in the write path (NPGC,
`--gc-policy in-path`) vs parallel GC on idle banks (PLLGC, `parallel`), and adaptive GC
(`adaptive`) vs parallel.

Table 5 / Fig. 5 (paper: 546 s vs 400 s; "much more" writes over 2 ms with NPGC): an aged
device (`--precondition 90`: 90 % filled, random overwrites to GC steady state, standing in
for the paper's aging ioctl), then one application thread overwriting a span sequentially in
4 KiB writes with an fsync after each (`fua=1`, QD 1). Paper: 1 GiB overwritten 16 times on
8 GiB of flash; full run here: 128 MiB overwritten twice on 512 MiB, lftl-card preset.

Fig. 6 (paper: 217 s adaptive vs 251 s parallel): 128 application threads (`--queue-depth
128`), each sleeping 20 ms after every 32 KiB write and 10 s after every 2 MiB (the
`thinktime` workload: its long pause falls on whichever stream sends each 64th write), same
aged device. Paper: 8 GiB written; full run here: 256 MiB. Run twice: buffered writes (as the
paper's, acknowledged once in the FTL's buffer) and FUA writes (`fua=1`: each completes when
programmed, so its latency shows every wait for a bank GC occupies) with 128 and 32 streams;
in-path GC as a reference in the FUA rows.
"""

import common


def over(run_dir, limit_us):
    return sum(1 for x in common.latencies(run_dir, "write") if x > limit_us)


def main():
    a = common.parse_args("lftl_gc", __doc__)
    cap, span, passes = ("128M", 32 << 20, 1) if a.quick else ("512M", 128 << 20, 2)
    writes = span // 4096 * passes
    rows = []
    paper5 = {"in-path": 546, "parallel": 400}
    for policy in ("in-path", "parallel", "adaptive"):
        s, d = common.replay(a, f"table5-{policy}", [
            "--preset", "lftl-card", "--capacity", cap, "--precondition", 90,
            "--gc-policy", policy, "--queue-depth", 1, "--workload",
            f"seq,bs=4k,span={span},requests={writes},fua=1"])
        rows.append({
            "policy": policy,
            "paper elapsed s": paper5.get(policy),
            "ftld elapsed s": s["simulated_seconds"],
            "ftld writes > 2 ms": over(d, 2000),
            "ftld mean write us": s["write"]["mean_us"],
            "ftld max write us": s["write"]["max_us"],
            "ftld GC erases": s["gc"]["erases"],
            "ftld WAF": s["waf"],
        })
    ip, pl = rows[0]["ftld elapsed s"], rows[1]["ftld elapsed s"]
    common.write_table(
        a, "LFTL Table 5 / Fig. 5: GC in the write path vs parallel GC (aged lftl-card)",
        ["policy", "paper elapsed s", "ftld elapsed s", "ftld writes > 2 ms",
         "ftld mean write us", "ftld max write us", "ftld GC erases", "ftld WAF"], rows,
        f"Parallel / in-path elapsed: paper {400/546:.2f}, ftld {pl/ip:.2f}.")
    threads = 128
    per_thread = 8 if a.quick else 64  # 32 KiB writes per thread
    rows = []
    paper6 = {"parallel": 251, "adaptive": 217}
    runs = [("buffered", threads, p) for p in ("parallel", "adaptive")]
    runs += [("FUA", n, p) for n in (32, threads) for p in ("parallel", "adaptive")]
    runs += [("FUA", threads, "in-path")]
    for writes, streams, policy in runs:
        fua = int(writes == "FUA")
        s, d = common.replay(a, f"fig6-{policy}" + (f"-fua-{streams}" if fua else ""), [
            "--preset", "lftl-card", "--capacity", cap, "--precondition", 90,
            "--gc-policy", policy, "--queue-depth", streams, "--workload",
            f"thinktime,bs=32k,think=20ms,every=64,long=10s,requests={threads * per_thread},"
            f"fua={fua}"])
        rows.append({
            "writes": writes,
            "streams": streams,
            "policy": policy,
            "paper elapsed s": None if fua else paper6.get(policy),
            "ftld elapsed s": s["simulated_seconds"],
            "ftld mean write us": s["write"]["mean_us"],
            "ftld p99 write us": s["write"]["p99_us"],
            "ftld writes > 2 ms": over(d, 2000),
            "ftld GC erases": s["gc"]["erases"],
            "ftld WAF": s["waf"],
        })
    mean = {(r["writes"], r["streams"], r["policy"]): r["ftld mean write us"] for r in rows}
    ratio = "; ".join(
        f"{n} streams {mean[('FUA', n, 'adaptive')] / mean[('FUA', n, 'parallel')]:.2f}"
        for n in (32, threads))
    common.write_table(
        a, "LFTL Fig. 6: adaptive vs parallel GC, 128 threads with think time",
        ["writes", "streams", "policy", "paper elapsed s", "ftld elapsed s",
         "ftld mean write us", "ftld p99 write us", "ftld writes > 2 ms", "ftld GC erases",
         "ftld WAF"], rows,
        f"FUA mean write, adaptive / parallel: {ratio} (paper, 128 threads: adaptive lower; "
        f"217 / 251 s elapsed).")


if __name__ == "__main__":
    main()
