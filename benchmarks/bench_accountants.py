"""Benchmark jaxdp against the peers on the reference DP-SGD settings.

Runs every accountant in one process on the same cases (the epsilon rows of
``tests/reference_values.py``) and writes a markdown table of epsilon, the
relative error against the reference oracle, and the time per query (median of
``--repeats`` runs, after JIT compilation for jaxdp), plus speed ratios.

    python benchmarks/bench_accountants.py [--repeats 5] [--no-prv] [--out benchmarks/results/foundation.md]

Later issues add their methods to ``JAXDP_METHODS``.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

import _peers  # noqa: E402
import reference_values  # noqa: E402

import jaxdp  # noqa: E402

JAXDP_METHODS = ["rdp", "saddlepoint", "saddlepoint-certified"]


def _time(fn, repeats):
    times, value = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return float(value), statistics.median(times)


def jaxdp_epsilon(method, sigma, q, steps, delta):
    m = jaxdp.Gaussian(sigma) if q >= 1 else jaxdp.PoissonSubsampledGaussian(sigma, q)
    return jaxdp.epsilon_for_delta(m, delta=delta, num_steps=steps, method=method).block_until_ready()


def run(repeats, with_prv, methods):
    rows = [r for r in reference_values.ROWS if r["query"] == "epsilon" and r["mechanism"] == "poisson_gaussian"]
    results = []
    for r in rows:
        args = (r["sigma"], r["q"], r["steps"], r["delta"])
        entry = {"case": r["case"], "steps": r["steps"], "delta": r["delta"], "ref": r["epsilon"], "acc": {}}
        for method in methods:
            jaxdp_epsilon(method, *args)  # compile
            entry["acc"][f"jaxdp-{method}"] = _time(functools.partial(jaxdp_epsilon, method, *args), repeats)
        peer_repeats = max(1, repeats // 3)
        pld = functools.partial(_peers.dp_accounting_pld_epsilon, *args)
        entry["acc"]["dp_accounting PLD"] = _time(pld, peer_repeats)
        rdp = functools.partial(_peers.dp_accounting_rdp_epsilon, *args)
        entry["acc"]["dp_accounting RDP"] = _time(rdp, peer_repeats)
        if with_prv:
            try:
                entry["acc"]["prv_accountant"] = _time(functools.partial(_peers.prv_accountant_epsilon, *args), 1)
            except Exception as err:  # prv_accountant raises at tiny delta
                entry["acc"]["prv_accountant"] = (float("nan"), float("nan"))
                entry["prv_error"] = type(err).__name__
        results.append(entry)
        print(entry["case"], entry["steps"], {k: (round(v[0], 6), round(v[1], 4)) for k, v in entry["acc"].items()})
    return results


def jaxdp_delta(method, sigma, q, steps, epsilon):
    m = jaxdp.Gaussian(sigma) if q >= 1 else jaxdp.PoissonSubsampledGaussian(sigma, q)
    return float(jaxdp.delta_for_epsilon(m, epsilon=epsilon, num_steps=steps, method=method))


def delta_rows_markdown(methods):
    """delta(eps) on every delta row; peer values are the ones stored in the reference table."""
    rows = [r for r in reference_values.ROWS if r["query"] == "delta"]
    head = "| case | steps | eps | reference delta | " + " | ".join(f"jaxdp-{m} (rel. err)" for m in methods)
    head += " | dp_accounting PLD (stored) | prv_accountant (stored) |"
    sep = "|---|---|---|---|" + "---|" * (len(methods) + 2)
    lines = ["", "## delta(eps) on the reference delta rows", "", head, sep]
    for r in rows:
        cells = []
        for m in methods:
            v = jaxdp_delta(m, r["sigma"], r["q"], r["steps"], r["epsilon"])
            cells.append(f"{v:.6g} ({(v - r['delta']) / r['delta']:+.1e})")
        for peer in ["dp_accounting_pld", "prv_accountant"]:
            v = r.get(peer)
            cells.append("-" if v is None else f"{v:.6g} ({(v - r['delta']) / r['delta']:+.1e})")
        first = f"| {r['case']} | {r['steps']} | {r['epsilon']:g} | {r['delta']:.6g} | "
        lines.append(first + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def to_markdown(results, repeats):
    names = list(results[0]["acc"])
    lines = [
        "# Accountant benchmark: epsilon for Poisson-subsampled Gaussian DP-SGD settings",
        "",
        f"Median of {repeats} runs after compilation (peers: median of max(1, {repeats}//3) runs; "
        "prv_accountant: 1 run). Relative error against the reference oracle (`tests/reference_values.py`). "
        "Machine: this project's 2-core CPU.",
        "",
        "| case | steps | delta | reference eps | " + " | ".join(f"{n} eps (rel. err) | {n} s" for n in names) + " |",
        "|---|---|---|---|" + "---|---|" * len(names),
    ]
    for e in results:
        cells = []
        for n in names:
            v, t = e["acc"][n]
            if v != v:  # NaN
                cells += [f"failed ({e.get('prv_error', 'nan')})", "-"]
            else:
                cells += [f"{v:.6g} ({(v - e['ref']) / e['ref']:+.1e})", f"{t:.4f}"]
        lines.append(f"| {e['case']} | {e['steps']} | {e['delta']:g} | {e['ref']:.6g} | " + " | ".join(cells) + " |")
    lines += ["", "## Speed ratios (peer seconds / jaxdp seconds, median over cases)", ""]
    for m in [n for n in names if n.startswith("jaxdp-")]:
        for peer in [n for n in names if not n.startswith("jaxdp-")]:
            ratios = [e["acc"][peer][1] / e["acc"][m][1] for e in results if e["acc"][peer][1] == e["acc"][peer][1]]
            if ratios:
                lines.append(f"- {peer} / {m}: median {statistics.median(ratios):.1f}x "
                             f"(min {min(ratios):.1f}x, max {max(ratios):.1f}x)")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-prv", action="store_true", help="skip prv_accountant (slow: up to ~1 min per case)")
    ap.add_argument("--methods", nargs="*", default=JAXDP_METHODS)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "foundation.md"))
    a = ap.parse_args()
    results = run(a.repeats, not a.no_prv, a.methods)
    text = to_markdown(results, a.repeats) + delta_rows_markdown([m for m in a.methods if m != "exact"])
    with open(a.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
