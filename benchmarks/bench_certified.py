"""Targets of the certified accountant (issue 5): never below the reference, tight, fast.

    python benchmarks/bench_certified.py [--out benchmarks/results/certified.md] [--no-peers]

On this machine, in one process:
* every delta row and every epsilon row of the reference table: jaxdp ``certified`` with its
  relative error against the reference oracle (a negative error is a bound below the oracle),
  and dp_accounting's pessimistic PLD (discretisation 1e-4) beside it;
* the time of one query (median after compilation) against dp_accounting's PLD
  (discretisation 1e-4, pessimistic, a proven bound too) run live on the same case, and the
  rows where the peers fail (infinite / vacuous epsilon, or an exception) and jaxdp does not;
* stress cases beyond the table: 1e5 steps, delta = 1e-15, a few steps with a tiny q.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

import _peers  # noqa: E402
import reference_values  # noqa: E402
from _helpers import mechanism_for_row  # noqa: E402
from _timing import median_time, rel, timed  # noqa: E402

import jaxdp  # noqa: E402


def delta_rows(lines, worst):
    lines += ["## Delta rows: certified delta(eps) against the reference oracle", ""]
    lines += ["| case | eps | reference delta | certified | rel. err | >= ref | PLD 1e-4 (stored) | rel. err | ms |"]
    lines += ["|---|---|---|---|---|---|---|---|---|"]
    for row in reference_values.ROWS:
        if row["query"] != "delta":
            continue
        m = mechanism_for_row(row)

        def f(m=m, row=row):
            return jaxdp.delta_for_epsilon(m, epsilon=row["epsilon"], num_steps=row["steps"], method="certified")

        sec = median_time(f, repeats=5)
        got = float(f())
        ref = row["delta"]
        pld = row.get("dp_accounting_pld")
        worst["delta"] = max(worst["delta"], abs(got / ref - 1))
        worst["delta_ms"] = max(worst["delta_ms"], sec * 1e3)
        lines.append(
            f"| {row['case']} | {row['epsilon']:g} | {ref:.6e} | {got:.6e} | {rel(got, ref)} | "
            f"{'yes' if got >= ref * (1 - 1e-5) else 'NO'} | {pld if pld is None else f'{pld:.6e}'} | "
            f"{rel(pld, ref)} | {sec * 1e3:.0f} |"
        )
    lines.append("")


def epsilon_rows(lines, worst, peers):
    lines += ["## Epsilon rows: certified eps(delta), and dp_accounting's pessimistic PLD live", ""]
    lines += [
        "| case | k | steps | delta | reference eps | certified | rel. err | >= ref | ms | PLD 1e-4 eps | rel. err "
        "| PLD s | PLD / jaxdp time |"
    ]
    lines += ["|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios = []
    for row in reference_values.ROWS:
        if row["query"] != "epsilon":
            continue
        m = mechanism_for_row(row)

        def f(m=m, row=row):
            return jaxdp.epsilon_for_delta(m, delta=row["delta"], num_steps=row["steps"], method="certified")

        sec = median_time(f, repeats=5)
        got = float(f())
        ref = row["epsilon"]
        tol = 1e-4 if row["mechanism"] == "poisson_gaussian_group" else 1e-5
        worst["eps"] = max(worst["eps"], abs(got / ref - 1))
        key = "eps_ms_group" if row["mechanism"] == "poisson_gaussian_group" else "eps_ms"
        worst[key] = max(worst[key], sec * 1e3)
        pld, pld_s, pld_err = (None, None, "skipped")
        if peers and row["mechanism"] != "poisson_gaussian_group":
            pld, pld_s, pld_err = timed(
                lambda row=row: _peers.dp_accounting_pld_epsilon(row["sigma"], row["q"], row["steps"], row["delta"])
            )
        elif row.get("dp_accounting_pld") is not None:
            pld, pld_err = row["dp_accounting_pld"], "stored"
        ratio = None if pld_s is None else pld_s / sec
        if ratio is not None:
            ratios.append(ratio)
        print(row["case"], got, sec, pld, pld_s, file=sys.stderr, flush=True)
        lines.append(
            f"| {row['case']} | {row.get('group_size', 1)} | {row['steps']} | {row['delta']:g} | {ref:.6f} | "
            f"{got:.6f} | {rel(got, ref)} | {'yes' if got >= ref - tol else 'NO'} | {sec * 1e3:.0f} | "
            f"{'—' if pld is None else f'{pld:.6f}'} | {rel(pld, ref)} | "
            f"{'—' if pld_s is None else f'{pld_s:.2f}'}{'' if pld_err in (None,) else f' ({pld_err})'} | "
            f"{'—' if ratio is None else f'{ratio:.1f}x'} |"
        )
    lines.append("")
    if ratios:
        lines.append(
            f"Speed vs dp_accounting PLD (1e-4): median {statistics.median(ratios):.1f}x, "
            f"min {min(ratios):.1f}x, max {max(ratios):.1f}x over {len(ratios)} rows."
        )
        lines.append("")


STRESS = [
    # (sigma, q, steps, delta, note)
    (0.65, 0.01, 100_000, 1e-5, "1e5 steps"),
    (0.8, 0.001, 100_000, 1e-10, "1e5 steps, small delta"),
    (2.0, 0.01, 3000, 1e-15, "delta = 1e-15"),
    (0.5, 0.001, 1000, 1e-15, "delta = 1e-15, sigma 0.5"),
    (1.0, 1e-4, 1, 1e-6, "one step, tiny q"),
    (1.0, 1e-4, 10, 1e-10, "ten steps, tiny q"),
]


def stress(lines, peers):
    lines += ["## Beyond the table", ""]
    lines += [
        "| case | sigma | q | steps | delta | certified | ms | characteristic (estimate) | rel. gap "
        "| PLD 1e-4 | PLD 1e-5 | prv_accountant |"
    ]
    lines += ["|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for sigma, q, steps, delta, note in STRESS:
        m = jaxdp.PoissonSubsampledGaussian(sigma, q)

        def f(m=m, steps=steps, delta=delta):
            return jaxdp.epsilon_for_delta(m, delta=delta, num_steps=steps, method="certified")

        sec = median_time(f, repeats=5)
        got = float(f())
        est = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=steps, method="characteristic"))
        cells = []
        args = (sigma, q, steps, delta)
        for fn in (
            (lambda a=args: _peers.dp_accounting_pld_epsilon(*a)),
            (lambda a=args: _peers.dp_accounting_pld_epsilon(*a, discretization=1e-5)),
            (lambda a=args: _peers.prv_accountant_epsilon(*a)),
        ):
            if not peers or steps > 20000:  # the peers' grids outgrow this machine's memory there
                cells.append("skipped")
                continue
            v, s, err = timed(fn)
            cells.append(err if err else f"{v:.6g} ({s:.1f} s)")
        print(note, got, sec, cells, file=sys.stderr, flush=True)
        lines.append(
            f"| {note} | {sigma:g} | {q:g} | {steps} | {delta:g} | {got:.6g} | {sec * 1e3:.0f} | {est:.6g} | "
            f"{(got - est) / est:+.1e} | {' | '.join(cells)} |"
        )
    lines.append("")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "results", "certified.md"))
    ap.add_argument("--no-peers", action="store_true")
    args = ap.parse_args()
    peers = not args.no_peers
    worst = {"delta": 0.0, "eps": 0.0, "delta_ms": 0.0, "eps_ms": 0.0, "eps_ms_group": 0.0}
    lines = ["# Certified accountant (issue 5)", ""]
    lines += ["Generated by `python benchmarks/bench_certified.py` on this CPU.", ""]
    body = []
    delta_rows(body, worst)
    epsilon_rows(body, worst, peers)
    stress(body, peers)
    lines += [
        "## Summary against the targets",
        "",
        f"* worst |relative error| of certified delta over the delta rows: {worst['delta']:.1e} (target 1e-2)",
        f"* worst |relative error| of certified epsilon over the epsilon rows: {worst['eps']:.1e} (target 5e-4)",
        f"* slowest delta(eps) query: {worst['delta_ms']:.0f} ms; slowest eps(delta) query (subsampled Gaussian): "
        f"{worst['eps_ms']:.0f} ms (target 200 ms); group mixtures: {worst['eps_ms_group']:.0f} ms",
        "",
    ]
    lines += body
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
