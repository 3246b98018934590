#!/usr/bin/env python3
"""Write amplification of the page FTL against the greedy limit (issue 14): uniform random
4 KiB overwrites of a full device at 7 % and 28 % over-provisioning, with 1, 2 and 4 write
queues, and a hot/cold workload (80 % of writes to 20 % of the space) with greedy and
cost-benefit victims, each without and with hot/cold separation of host writes by update
recency (`[ftl] separation = "hot-cold"`; uniform writes with it too, for its cost).

The limit is Xiang & Kurkoski's Lambert-W expression for greedy GC under uniform random writes
(arXiv 1110.4245), WA = a / (a + W0(-a e^-a)), a = 1 + spare factor, at the device's physical
spare factor (every good block but the superblock and checkpoint areas, against the exported
space); `ftld replay` reports both (`spare_factor`, `waf_limit_greedy`). Each run: the default
preset at 1 GiB (quick: 64 MiB), preconditioned (filled, then overwritten at random until GC
is in steady state), then `requests` 4 KiB writes closed loop at 32 in flight, virtual time.

The hot/cold rows have no closed-form limit; the uniform limit at the same spare is shown for
scale.

Write frontiers are shared per bank (`[ftl] frontiers = "per-bank"`, the default): the queues
take turns on each bank's open block, and the format sets the same room aside for open blocks
whatever the queue count, so the per-bank rows have one physical spare. The rows marked
`per-queue` give every queue its own open block on every bank (paper 000's design): the format
sets a block per queue and bank aside for them, and about half of each sits idle, so the cost
grows with the queue count (served, the default follows the CPUs, up to 8).
"""

import common


def main():
    a = common.parse_args("waf_limit", __doc__)
    capacity = "64M" if a.quick else "1G"
    requests = 100_000 if a.quick else 1_000_000
    rows = []

    def run(tag, op, queues, workload, victim="greedy", separation="none", frontiers="per-bank"):
        cfg = a.out / f"{tag}.toml"
        cfg.write_text(f'[ftl]\noverprovision = {op}\nvictim_policy = "{victim}"\n'
                       f'separation = "{separation}"\nfrontiers = "{frontiers}"\n')
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
            "hot pages": s["gc"]["hot_pages"] / requests,
        }

    def row(workload, op, queues, victims, separation="none", frontiers="per-bank"):
        return {"workload": workload, "OP": op, "queues": queues, "frontiers": frontiers,
                "victims": victims, "separation": separation}

    for op in (0.07, 0.28):
        for q in (1, 2, 4, 8):
            r = row("uniform", op, q, "greedy")
            r.update(run(f"uniform-op{op}-q{q}", op, q, "random"))
            rows.append(r)
    for q in (2, 8):
        r = row("uniform", 0.07, q, "greedy", frontiers="per-queue")
        r.update(run(f"uniform-op0.07-q{q}-per-queue", 0.07, q, "random", frontiers="per-queue"))
        rows.append(r)
    r = row("uniform", 0.07, 2, "cost-benefit")
    r.update(run("uniform-op0.07-q2-cost-benefit", 0.07, 2, "random", "cost-benefit"))
    rows.append(r)
    r = row("uniform", 0.07, 2, "greedy", "hot-cold")
    r.update(run("uniform-op0.07-q2-hot-cold", 0.07, 2, "random", "greedy", "hot-cold"))
    rows.append(r)
    for victim in ("greedy", "cost-benefit"):
        for sep in ("none", "hot-cold"):
            r = row("hot/cold 80/20", 0.07, 2, victim, sep)
            r.update(run(f"hotcold-{victim}-{sep}", 0.07, 2, "hotcold,hot=80/20", victim, sep))
            rows.append(r)
    common.write_table(
        a, "WAF against the greedy Lambert-W limit (default preset, 4 KiB random overwrites)",
        ["workload", "OP", "queues", "frontiers", "victims", "separation", "spare factor",
         "limit", "WAF",
         "WAF / limit", "hot pages"],
        rows,
        "Goal (issue 14): WAF / limit <= 1.10 for uniform writes; hot/cold at or below greedy. "
        "`hot pages`: share of the host pages placed in hot blocks.")


if __name__ == "__main__":
    main()
