"""Benchmark jaxdp against the peers on the reference DP-SGD settings.

Runs every accountant in one process on the same cases (the epsilon rows of
``tests/reference_values.py``) and writes markdown tables of epsilon's relative error against the reference
oracle and of the time per query (median of ``--repeats`` runs, after JIT compilation for jaxdp), plus speed
ratios, under the runner's provenance line.  Every built-in method runs (but ``exact``, for Gaussians only), the
default (``certified``) first.

    python -m benchmarks accountants [--repeats 5] [--no-prv] [--out benchmarks/results/foundation.md]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

import _peers  # noqa: E402
import reference_values  # noqa: E402
from _timing import measure  # noqa: E402

import jaxdp  # noqa: E402

#: the default first, then the other certified bounds, the estimates and the baseline (``exact`` takes Gaussians only)
JAXDP_METHODS = [
    "certified",
    "certified-fast",
    "delta2-certified",
    "characteristic",
    "saddlepoint",
    "delta2",
    "gil-pelaez",
    "rdp",
]


def _time(fn, repeats, warmup=True):
    value, seconds = measure(fn, repeats, warmup=warmup)
    return float(value), seconds


def jaxdp_epsilon(method, sigma, q, steps, delta):
    m = jaxdp.Gaussian(sigma) if q >= 1 else jaxdp.PoissonSubsampledGaussian(sigma, q)
    return jaxdp.epsilon_for_delta(m, delta=delta, num_steps=steps, method=method).block_until_ready()


def run(repeats, with_prv, methods):
    rows = [r for r in reference_values.ROWS if r["query"] == "epsilon" and r["mechanism"] == "poisson_gaussian"]
    results = []
    for r in rows:
        args = (r["sigma"], r["q"], r["steps"], r["delta"])
        entry = {"case": r["case"], "steps": r["steps"], "delta": r["delta"], "ref": r["epsilon"], "acc": {}}
        for method in methods:  # (the warm-up call compiles)
            entry["acc"][f"jaxdp-{method}"] = _time(functools.partial(jaxdp_epsilon, method, *args), repeats)
        peer_repeats = max(1, repeats // 3)
        pld = functools.partial(_peers.dp_accounting_pld_epsilon, *args)
        entry["acc"]["dp_accounting PLD"] = _time(pld, peer_repeats, warmup=False)
        rdp = functools.partial(_peers.dp_accounting_rdp_epsilon, *args)
        entry["acc"]["dp_accounting RDP"] = _time(rdp, peer_repeats, warmup=False)
        if with_prv:
            try:
                prv = functools.partial(_peers.prv_accountant_epsilon, *args)
                entry["acc"]["prv_accountant"] = _time(prv, 1, warmup=False)
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


def _short(name):
    return name.removeprefix("jaxdp-")


def to_markdown(results, repeats, table):
    names = list(results[0]["acc"])
    lines = [
        "# Accountant benchmark: epsilon for Poisson-subsampled Gaussian DP-SGD settings",
        "",
        f"jaxdp's methods are the columns before the peers', the default (`certified`) first; `jaxdp methods` says "
        "which are proven upper bounds (certified, certified-fast, delta2-certified, rdp). "
        f"Time: median of {repeats} queries after "
        f"compilation (peers: median of max(1, {repeats}//3) runs, prv_accountant one run). Relative error against "
        "the reference oracle (`tests/reference_values.py`), whose epsilon is solved to 1e-5 absolute: a certified "
        "bound may sit that much below it (dp_accounting's pessimistic PLD does on psg_0.65_0.01, 1,000 steps).",
        "",
        "## Summary over the epsilon rows (the README's headline table)",
        "",
        table,
        "## epsilon (relative error against the oracle)",
        "",
        "| case | steps | delta | reference eps | " + " | ".join(_short(n) for n in names) + " |",
        "|---|---|---|---|" + "---|" * len(names),
    ]
    for e in results:
        cells = []
        for n in names:
            v, _ = e["acc"][n]
            err = f"failed ({e.get('prv_error', 'nan')})"
            cells.append(err if v != v else f"{v:.6g} ({(v - e['ref']) / e['ref']:+.1e})")
        lines.append(f"| {e['case']} | {e['steps']} | {e['delta']:g} | {e['ref']:.6g} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Seconds per query",
        "",
        "| case | steps | delta | " + " | ".join(_short(n) for n in names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for e in results:
        cells = ["-" if e["acc"][n][1] != e["acc"][n][1] else f"{e['acc'][n][1]:.4f}" for n in names]
        lines.append(f"| {e['case']} | {e['steps']} | {e['delta']:g} | " + " | ".join(cells) + " |")
    lines += ["", "## Speed ratios (peer seconds / jaxdp seconds, median over cases)", ""]
    for m in [n for n in names if n.startswith("jaxdp-")]:
        for peer in [n for n in names if not n.startswith("jaxdp-")]:
            ratios = [e["acc"][peer][1] / e["acc"][m][1] for e in results if e["acc"][peer][1] == e["acc"][peer][1]]
            if ratios:
                lines.append(
                    f"- {peer} / {m}: median {statistics.median(ratios):.1f}x "
                    f"(min {min(ratios):.1f}x, max {max(ratios):.1f}x)"
                )
    return "\n".join(lines) + "\n"


#: proven upper bounds among the columns (the rest are estimates; the peers' PLD is pessimistic, its RDP an upper
#: bound, prv_accountant's an estimate with error bounds)
CERTIFIED = {"certified", "certified-fast", "delta2-certified", "rdp", "dp_accounting PLD", "dp_accounting RDP"}
README = os.path.join(HERE, "..", "README.md")
HEADLINE_MARKERS = ("<!-- headline table: python -m benchmarks accountants -->", "<!-- end of headline table -->")


def headline(results):
    """One row per accountant over every epsilon row: guarantee, median and largest relative error against the
    oracle, the largest under-report (most negative error, blank where none), median seconds per query and
    dp_accounting PLD's median time ratio to it."""
    names = list(results[0]["acc"])
    lines = [
        "| accountant | guarantee | median rel. error | largest rel. error | largest under-report | median s/query "
        "| PLD time / its time |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in names:
        errs = [(e["acc"][n][0] - e["ref"]) / e["ref"] for e in results if e["acc"][n][0] == e["acc"][n][0]]
        secs = [e["acc"][n][1] for e in results if e["acc"][n][1] == e["acc"][n][1]]
        ratios = [
            e["acc"]["dp_accounting PLD"][1] / e["acc"][n][1] for e in results if e["acc"][n][1] == e["acc"][n][1]
        ]
        failed = len(results) - len(errs)
        if not errs:
            lines.append(f"| {_short(n)} | | failed on every row | | | | |")
            continue
        worst = max(errs, key=abs)
        under = min(errs)
        short = _short(n)
        lines.append(
            f"| {short}{' (default)' if short == 'certified' else ''} "
            f"| {'proven upper bound' if short in CERTIFIED else 'estimate'} "
            f"| {statistics.median(abs(v) for v in errs):.1e} | {worst:+.1e}"
            f"{f' ({failed} failed)' if failed else ''} | {f'{under:+.1e}' if under < 0 else ''} "
            f"| {statistics.median(secs):.4f} | {statistics.median(ratios):.3g}x |"
        )
    return "\n".join(lines) + "\n"


def write_headline(table, readme=README):
    """Replaces the README's headline table (between ``HEADLINE_MARKERS``) with ``table``."""
    with open(readme) as f:
        text = f.read()
    start, end = HEADLINE_MARKERS
    i, j = text.index(start) + len(start), text.index(end)
    with open(readme, "w") as f:
        f.write(text[:i] + "\n" + table + text[j:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-prv", action="store_true", help="skip prv_accountant (slow: up to ~1 min per case)")
    ap.add_argument("--methods", nargs="*", default=JAXDP_METHODS)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "foundation.md"))
    a = ap.parse_args()
    results = run(a.repeats, not a.no_prv, a.methods)
    table = headline(results)
    text = to_markdown(results, a.repeats, table) + delta_rows_markdown([m for m in a.methods if m != "exact"])
    with open(a.out, "w") as f:
        f.write(text)
    if a.methods == JAXDP_METHODS:  # (the README's table is of the full run only)
        write_headline(table)
    print(text)


if __name__ == "__main__":
    main()
