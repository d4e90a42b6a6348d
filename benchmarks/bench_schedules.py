"""Schedules of many segments: compile once, query in time linear in the real segments (issue "Accountants
that work inside users' compiled code", item 2).

    python benchmarks/bench_schedules.py [--out benchmarks/results/schedules.md] [--methods saddlepoint,...]

Setting of the issue: segments of 200 steps of ``PoissonSubsampledGaussian(sigma_k, 0.01)`` with sigma_k
spread over [0.8, 2.0], delta = 1e-5, ``epsilon_for_delta`` (both adjacency directions).  For each method
a fresh process (persistent cache off) times the first call for S = 1 segment, then, in the same process,
the first and the repeated call for S = 2, 8, 32, 100 (no recompilation: the first call of a new S is a
query); a second fresh process times the first call for S = 100 alone (its compile, against S = 1's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import jaxdp
method, sizes = sys.argv[1], json.loads(sys.argv[2])
rows = []
for s in sizes:
    sig = np.linspace(0.8, 2.0, s) if s > 1 else np.array([1.1])
    comp = jaxdp.Composition.from_schedule(noise_multipliers=sig, sampling_probs=np.full(s, 0.01),
                                           counts=np.full(s, 200))
    t = time.perf_counter(); eps = float(jaxdp.epsilon_for_delta(comp, delta=1e-5, method=method))
    first = time.perf_counter() - t
    again = []
    for _ in range(5):
        t = time.perf_counter(); float(jaxdp.epsilon_for_delta(comp, delta=1e-5, method=method))
        again.append(time.perf_counter() - t)
    rows.append({"segments": s, "first": first, "again": sorted(again)[2], "epsilon": eps})
print(json.dumps({"rows": rows, "total": time.perf_counter() - t0}))
"""

TARGET_QUERY = {"characteristic": 0.100, "certified": 0.400, "certified-fast": 0.400, "saddlepoint": 0.005}


def _run(method, sizes):
    env = dict(os.environ, JAX_ENABLE_COMPILATION_CACHE="false", JAXDP_CACHE_DIR="")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, method, json.dumps(sizes)], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/schedules.md")
    ap.add_argument("--methods", default="saddlepoint,characteristic,certified-fast,certified")
    args = ap.parse_args()
    lines = [
        "# Schedules: one compile for 1 to 100 segments",
        "",
        f"`benchmarks/bench_schedules.py`, {time.strftime('%Y-%m-%d')}, this machine's CPU, fresh processes with the",
        "persistent cache off. Segments of 200 steps of PoissonSubsampledGaussian(sigma_k, 0.01), delta = 1e-5.",
        "",
        "| method | S | first call (s) | again (ms) | query target (ms) | epsilon |",
        "|---|---|---|---|---|---|",
    ]
    summary = []
    for method in args.methods.split(","):
        res = _run(method, [1, 2, 8, 32, 100])
        for r in res["rows"]:
            target = TARGET_QUERY.get(method)
            lines.append(
                f"| {method} | {r['segments']} | {r['first']:.2f} | {1e3 * r['again']:.1f} | "
                f"{'' if target is None else f'<= {1e3 * target:g}'} | {r['epsilon']:.6f} |"
            )
        alone = _run(method, [100])["rows"][0]
        ratio = alone["first"] / res["rows"][0]["first"]
        summary.append(
            f"| {method} | {res['rows'][0]['first']:.2f} | {alone['first']:.2f} | {ratio:.2f} | <= 1.5 |"
        )
        print(lines[-1], summary[-1], flush=True)
    lines += [
        "",
        "The first call of S = 2 ... 100 after S = 1 in the same process is a query, not a compile: the",
        "program is the same (segments stacked, padded to 128).",
        "",
        "| method | first call, S = 1 (s) | first call, S = 100, fresh process (s) | ratio | target |",
        "|---|---|---|---|---|",
        *summary,
        "",
    ]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
