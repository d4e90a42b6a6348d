"""Fixed-batch sampling and group privacy (Ganesh 2024) against dp_accounting, same process, same cases.

    python benchmarks/bench_fixed_batch.py [--out benchmarks/results/fixed_batch.md] [--quick]

1. The ``group_cifar_*`` reference rows (Poisson, group sizes 1-16; CIFAR-10: q = 0.01, 2000 steps,
   delta = 1e-6): epsilon from ``certified`` and ``characteristic`` against the reference, the time of
   one query after compilation, and dp_accounting's PLD (``MixtureOfGaussiansDpEvent``, discretisation
   1e-3 as in the table) timed in the same process: the ratio.
2. Fixed batch size (the paper's setting: B = 500 of n = 50,000, 2000 steps, delta = 1e-6): the
   certified epsilon against dp_accounting's pessimistic PLD of the same mixture.
3. The under-report of accounting a fixed batch as Poisson at q = B / n, over sigma.
4. The group curves (plots under ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

import reference_values  # noqa: E402
from _timing import measure, once  # noqa: E402

import jaxdp  # noqa: E402


def _pld(sigma, sens, probs, steps, delta):
    import dp_accounting as dpa
    from dp_accounting import dp_event as ev

    def run():
        acc = dpa.pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-3)
        events = ev.MixtureOfGaussiansDpEvent(float(sigma), [float(c) for c in sens], [float(p) for p in probs])
        acc.compose(events, steps)
        return acc.get_epsilon(delta)

    return once(run)


def group_rows(lines, quick):
    lines += [
        "## 1. `group_cifar_*` rows (Poisson, q = 0.01, 2000 steps, delta = 1e-6)",
        "",
        "Times: one query after compilation (best of 3), this 2-core CPU; dp_accounting's PLD (`MixtureOfGaussians"
        "DpEvent`, discretisation 1e-3) timed once in the same process.",
        "",
        "| sigma | g | reference | certified | err | ms | characteristic | err | ms | PLD | PLD s | PLD / certified |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [r for r in reference_values.ROWS if r["case"].startswith("group_cifar")]
    if quick:
        rows = rows[:2]
    worst = 0.0
    for r in rows:
        m = jaxdp.MixtureOfGaussians.poisson_group(r["sigma"], r["q"], r["group_size"])
        out = {}
        for method in ("certified", "characteristic"):
            eps, sec = measure(
                lambda m=m, method=method, r=r: float(
                    jaxdp.epsilon_for_delta(m, delta=r["delta"], num_steps=r["steps"], method=method)
                ),
                3,
            )
            out[method] = (eps, sec, eps / r["epsilon"] - 1)
            worst = max(worst, abs(eps / r["epsilon"] - 1))
        pld, pld_s = _pld(r["sigma"], m.sensitivities, m.probs, r["steps"], r["delta"])
        c, ch = out["certified"], out["characteristic"]
        lines.append(
            f"| {r['sigma']:g} | {r['group_size']} | {r['epsilon']:.6f} | {c[0]:.6f} | {c[2]:+.2e} | {1e3 * c[1]:.0f} "
            f"| {ch[0]:.6f} | {ch[2]:+.2e} | {1e3 * ch[1]:.0f} | {pld:.6f} | {pld_s:.1f} | {pld_s / c[1]:.0f}x |"
        )
        print(lines[-1], flush=True)
    lines += ["", f"Worst relative error against the reference: {worst:.2e} (target 0.5 %).", ""]


def fixed_vs_pld(lines, quick):
    n, b, steps, delta = 50_000, 500, 2000, 1e-6
    lines += [
        f"## 2. Fixed batch B = {b} of n = {n}, {steps} steps, delta = {delta:g}: certified against dp_accounting",
        "",
        "The same mixture (sensitivity 2 x Hypergeometric(B, n + g, g)) as a `MixtureOfGaussiansDpEvent`, "
        "pessimistic PLD at discretisation 1e-3 (its upper bound; its error is of that order).",
        "",
        "| sigma | g | certified | ms | PLD (pessimistic) | PLD s | certified / PLD - 1 |",
        "|---|---|---|---|---|---|---|",
    ]
    cases = [(2.0, 1), (2.0, 4)] if quick else [(1.0, 1), (2.0, 1), (2.0, 4), (4.0, 1), (4.0, 8)]
    for sigma, g in cases:
        m = jaxdp.MixtureOfGaussians.fixed_batch_group(sigma, dataset_size=n, batch_size=b, group_size=g)
        eps, sec = measure(
            lambda m=m: float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=steps, method="certified")), 3
        )
        pld, pld_s = _pld(sigma, m.sensitivities, m.probs, steps, delta)
        lines.append(
            f"| {sigma:g} | {g} | {eps:.6f} | {1e3 * sec:.0f} | {pld:.6f} | {pld_s:.1f} | {eps / pld - 1:+.2e} |"
        )
        print(lines[-1], flush=True)
    lines.append("")


def under_report(lines, quick):
    n, b, steps, delta = 50_000, 500, 2000, 1e-6
    lines += [
        "## 3. A fixed batch accounted as Poisson: the under-report",
        "",
        f"epsilon (certified) of B = {b} of n = {n} (fixed) and of Poisson at q = B / n = {b / n:g}, {steps} "
        f"steps, delta = {delta:g}, g = 1.",
        "",
        "| sigma | fixed batch | as Poisson | factor |",
        "|---|---|---|---|",
    ]
    for sigma in (1.0, 2.0) if quick else (0.8, 1.0, 1.5, 2.0, 4.0, 8.0):
        fixed = jaxdp.MixtureOfGaussians.fixed_batch_group(sigma, dataset_size=n, batch_size=b)
        psg = jaxdp.PoissonSubsampledGaussian(sigma, b / n)
        ef = float(jaxdp.epsilon_for_delta(fixed, delta=delta, num_steps=steps, method="certified"))
        ep = float(jaxdp.epsilon_for_delta(psg, delta=delta, num_steps=steps, method="certified"))
        lines.append(f"| {sigma:g} | {ef:.4f} | {ep:.4f} | {ef / ep:.2f}x |")
        print(lines[-1], flush=True)
    lines.append("")


def curves(lines, quick):
    from jaxdp.cli import main

    out = os.path.join(HERE, "results")
    g = 8 if quick else 16
    lines += ["## 4. Group curves", ""]
    for name, extra in (
        ("group_curve_poisson.png", f"--sigma 2 --q 0.01 --group-size {g}"),
        ("group_curve_fixed.png", f"--sigma 2 --sampling fixed --dataset-size 50000 --batch-size 500 --group-size {g}"),
    ):
        path = os.path.join(out, name)
        t = time.perf_counter()
        main(f"group-curve {extra} --steps 2000 --delta 1e-6 --method characteristic --plot {path}".split())
        lines.append(
            f"- `{name}`: `jaxdp group-curve {extra} --steps 2000 --delta 1e-6` ({time.perf_counter() - t:.0f} s)"
        )
    lines.append("")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "results", "fixed_batch.md"))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    lines = [
        "# Fixed-batch sampling and group privacy",
        "",
        f"`python benchmarks/bench_fixed_batch.py` on {datetime.date.today()}, jaxdp against dp_accounting "
        "in one process (2-core CPU, no GPU).",
        "",
    ]
    for part in (group_rows, fixed_vs_pld, under_report, curves):
        part(lines, args.quick)
        with open(args.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
