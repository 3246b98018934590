#!/usr/bin/env python3
"""Write amplification of the page FTL against the greedy limit (issue 14): uniform random
4 KiB overwrites of a full device at 7 % and 28 % over-provisioning, with 1, 2 and 4 write
queues, and a hot/cold workload (80 % of writes to 20 % of the space) with greedy and
cost-benefit victims.

The limit is Xiang & Kurkoski's Lambert-W expression for greedy GC under uniform random writes
(arXiv 1110.4245), WA = a / (a + W0(-a e^-a)), a = 1 + spare factor, at the device's physical
spare factor (every good block but the superblock and checkpoint areas, against the exported
space); `ftld replay` reports both (`spare_factor`, `waf_limit_greedy`). Each run: the default
preset at 1 GiB (quick: 64 MiB), preconditioned (filled, then overwritten at random until GC
is in steady state), then `requests` 4 KiB writes closed loop at 32 in flight, virtual time.

More queues mean more space set aside for open blocks when the image is formatted (a block per
queue per bank), of which the FTL keeps about half idle, so the physical spare, and with it the
limit, moves with the queue count. The hot/cold rows have no closed-form limit; the uniform
limit at the same spare is shown for scale.
"""

import common


def main():
    a = common.parse_args("waf_limit", __doc__)
    capacity = "64M" if a.quick else "1G"
    requests = 100_000 if a.quick else 1_000_000
    rows = []

    def run(tag, op, queues, workload, victim="greedy"):
        cfg = a.out / f"{tag}.toml"
        cfg.write_text(f'[ftl]\noverprovision = {op}\nvictim_policy = "{victim}"\n')
        s, _ = common.replay(a, tag, [
            "--preset", "default", "--capacity", capacity, "--queues", queues,
            "--config", cfg, "--precondition", 100, "--queue-depth", 32, "--seed", 1,
            "--workload", f"{workload},bs=4k,read=0,requests={requests}"])
        limit = s["waf_limit_greedy"]
        return {
            "spare factor": s["spare_factor"],
            "limit": limit,
            "WAF": s["waf"],
            "WAF / limit": s["waf"] / limit if limit else None,
        }

    for op in (0.07, 0.28):
        for q in (1, 2, 4):
            r = {"workload": "uniform", "OP": op, "queues": q, "victims": "greedy"}
            r.update(run(f"uniform-op{op}-q{q}", op, q, "random"))
            rows.append(r)
    r = {"workload": "uniform", "OP": 0.07, "queues": 2, "victims": "cost-benefit"}
    r.update(run("uniform-op0.07-q2-cost-benefit", 0.07, 2, "random", "cost-benefit"))
    rows.append(r)
    for victim in ("greedy", "cost-benefit"):
        r = {"workload": "hot/cold 80/20", "OP": 0.07, "queues": 2, "victims": victim}
        r.update(run(f"hotcold-{victim}", 0.07, 2, "hotcold,hot=80/20", victim))
        rows.append(r)
    common.write_table(
        a, "WAF against the greedy Lambert-W limit (default preset, 4 KiB random overwrites)",
        ["workload", "OP", "queues", "victims", "spare factor", "limit", "WAF", "WAF / limit"],
        rows,
        "Goal (issue 14): WAF / limit <= 1.10 for uniform writes; hot/cold at or below greedy.")


if __name__ == "__main__":
    main()
