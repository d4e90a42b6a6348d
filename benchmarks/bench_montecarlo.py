"""Targets of the Monte Carlo accountant (issue: Monte Carlo accounting, Wang et al. 2023).

    python benchmarks/bench_montecarlo.py [--quick] [--out benchmarks/results/montecarlo.md]

Measures, on this machine, in one process (``--quick``: tiny sizes, a smoke run only):

1. importance sampling against simple Monte Carlo: per-sample variance ratios on the setting of
   the paper's Figure 6 (q = 1e-3, sigma = 0.6, eps = 1.5, 100 steps), the true delta from
   ``method="characteristic"``;
2. delta ~ 1e-10 (sigma = 1, q = 0.01, 2000 steps, eps = 4, reference row): the relative standard
   error of ``"tilted"`` with 10^6 samples, and what simple Monte Carlo sees;
3. epsilon(delta) against every reference epsilon row with at most 2000 steps;
4. coverage of the 95 % interval of ``montecarlo_epsilon`` over 50 seeds;
5. throughput (sampled steps per second, second call) of the three estimators and of naive JAX
   sampling of the privacy loss;
6. the online curve (``online_epsilon``, epsilon after every step of 2000) against per-step
   prv_accountant queries;
7. EVR (estimate-verify-release): placeholder until ``jaxdp.evr`` exists.

Reference values come from ``tests/reference_values.py`` (copied from the shared oracle table) and,
where the table has no row, from jaxdp's own ``method="characteristic"`` accountant (agrees with
prv_accountant / dp_accounting to ~1e-6).  Nothing here is CPU-specific: it runs unchanged on a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time

import jax
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)

import reference_values  # noqa: E402
from _helpers import mechanism_for_row  # noqa: E402

import jaxdp  # noqa: E402

try:  # public once the online API is exported; the private module until then
    from jaxdp import online_epsilon  # type: ignore[attr-defined]

    ONLINE_FROM = "jaxdp.online_epsilon"
except ImportError:  # pragma: no cover - depends on the branch
    from jaxdp.accountants.montecarlo._online import online_epsilon

    ONLINE_FROM = "jaxdp.accountants.montecarlo._online.online_epsilon"

PSG = jaxdp.PoissonSubsampledGaussian


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def key(seed):
    return jax.random.key(seed)


def clock(fn):
    """``(result blocked on, seconds)``."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - t0


def met(ok):
    return "met" if ok else "**not met**"


def sizes(quick):
    if quick:
        return dict(
            fig6_simple=20_000,
            fig6_is=4_000,
            tiny_tilted=10_000,
            tiny_simple=5_000,
            eps_samples=5_000,
            eps_group_samples=5_000,
            eps_rows=2,
            cover_seeds=5,
            cover_samples=5_000,
            tp_steps=100,
            tp_samples=[2**12, 2**13],
            naive_samples=[2**12],
            online_steps=100,
            online_samples=5_000,
            prv_points=3,
            online_ks=[10, 50, 100],
        )
    return dict(
        fig6_simple=1_000_000,
        fig6_is=200_000,
        tiny_tilted=1_000_000,
        tiny_simple=100_000,
        eps_samples=200_000,
        eps_group_samples=100_000,
        eps_rows=None,
        cover_seeds=50,
        cover_samples=100_000,
        tp_steps=1000,
        tp_samples=[2**16, 2**17, 2**18],
        naive_samples=[2**16],
        online_steps=2000,
        online_samples=100_000,
        prv_points=40,
        online_ks=[10, 100, 1000, 2000],
    )


# -- 1. importance sampling vs simple MC (paper's Figure 6 setting) ---------------------------------
def simple_variance_exact(m, eps, steps, span=10.0, points=201):
    """Per-sample variance of the simple estimator, ``E_P[f^2] - delta^2`` with ``f = (1 - e^{eps - L})_+``,
    from the characteristic accountant: ``E_P[f^2] = int_eps^inf 2 (1 - e^{eps-l}) e^{eps-l} P(L > l) dl`` and
    ``P(L > l) = delta(l) - delta'(l)`` (``delta'(l) = -e^l Q(L > l)``); also returns ``P(L > eps)``."""
    ls = eps + np.linspace(0.0, span, points)
    d = np.array(
        [float(jaxdp.delta_for_epsilon(m, epsilon=float(v), num_steps=steps, method="characteristic")) for v in ls]
    )
    tail = d - np.gradient(d, ls, edge_order=2)
    h = 2.0 * (1.0 - np.exp(eps - ls)) * np.exp(eps - ls) * tail
    ef2 = float(np.sum(0.5 * (h[1:] + h[:-1]) * np.diff(ls)))
    return ef2 - d[0] ** 2, float(tail[0])


def section_fig6(S, lines, summary, record):
    sigma, q, eps, steps = 0.6, 1e-3, 1.5, 100
    lines += [
        "## 1. Importance sampling vs simple Monte Carlo (paper's Figure 6 setting)",
        "",
        f"PSG sigma = {sigma}, q = {q}, eps = {eps}, {steps} steps.  Per-sample variance = stderr^2 x samples;",
        "the ratio is simple's per-sample variance over the estimator's (the factor fewer samples the",
        'estimator needs for the same standard error).  True delta: jaxdp `method="characteristic"`.',
        "`remove` is the paper's dominating pair (P = (1-q) N(0,s^2) + q N(1,s^2), Q = N(0,s^2));",
        "`add_or_remove` reports the larger direction.",
        "",
        "Simple Monte Carlo sees only a handful of samples with L > eps here (P(L > eps) ~ 3e-6), so its own",
        "variance estimate from 10^6 samples is itself very noisy (it swung by ~50x between seeds while this",
        "script was written).  The table therefore gives two ratios: against simple's *empirical* per-sample",
        "variance (stderr^2 x samples, the issue's definition) and against its *exact* per-sample variance",
        "E_P[f^2] - delta^2, f = (1 - e^{eps-L})_+, computed from the characteristic accountant as",
        "int_eps^inf 2 (1 - e^{eps-l}) e^{eps-l} P(L > l) dl with P(L > l) = delta(l) - delta'(l).",
        "The verdict uses the exact one.",
        "",
    ]
    true_by_adj, exact_by_adj = {}, {}
    per_dir = {}
    for d in ["remove", "add"]:
        md = PSG(sigma, q, adjacency=d)
        per_dir[d] = [float(jaxdp.delta_for_epsilon(md, epsilon=eps, num_steps=steps, method="characteristic"))]
    dom = max(per_dir, key=lambda d: per_dir[d][0])
    for d in {"remove", dom}:  # simple's exact variance where it is needed (add_or_remove: the larger direction)
        log(f"[1] exact simple variance, {d}")
        per_dir[d] += simple_variance_exact(PSG(sigma, q, adjacency=d), eps, steps)
    true_by_adj = {"remove": per_dir["remove"][0], "add_or_remove": per_dir[dom][0]}
    exact_by_adj = {"remove": per_dir["remove"][1:], "add_or_remove": per_dir[dom][1:]}
    lines += [
        f"True delta (characteristic): remove {per_dir['remove'][0]:.6e}, add {per_dir['add'][0]:.6e}, "
        f"add_or_remove {true_by_adj['add_or_remove']:.6e}.  The paper's caption states 7.7e-6, which does not "
        "match this setting; the values above are ours.  P(L > eps) under the dominating pair: "
        f"{per_dir[dom][2]:.3e} ({dom}).",
        "",
        "| adjacency | estimator | samples | delta estimate | rel. err | z | stderr | per-sample var | "
        "simple (empirical) / this | simple (exact) / this | seconds (incl. compile) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios, notes = {}, []
    for adj in ["remove", "add_or_remove"]:
        m = PSG(sigma, q, adjacency=adj)
        true = true_by_adj[adj]
        exact_var, p_tail = exact_by_adj[adj]
        var = {}
        rows = []
        for i, (est, n) in enumerate(
            [("simple", S["fig6_simple"]), ("tilted", S["fig6_is"]), ("tilted-one", S["fig6_is"])]
        ):
            log(f"[1] {adj} {est} n={n}")
            r, dt = clock(
                lambda m=m, est=est, n=n, i=i: jaxdp.montecarlo_delta(
                    m, epsilon=eps, num_steps=steps, key=key(100 + i), num_samples=n, estimator=est
                )
            )
            v, se = float(r.value), float(r.stderr)
            var[est] = se * se * n
            rows.append((est, n, v, se, dt))
            record.setdefault("fig6", []).append(
                dict(
                    adjacency=adj,
                    estimator=est,
                    samples=n,
                    value=v,
                    stderr=se,
                    true=true,
                    per_sample_var=var[est],
                    seconds=dt,
                )
            )
        for est, n, v, se, dt in rows:
            emp = var["simple"] / var[est] if var[est] > 0 else float("nan")
            ex = exact_var / var[est] if var[est] > 0 else float("nan")
            if est != "simple":
                ratios[(adj, est)] = (emp, ex)
            z = (v - true) / se if se > 0 else float("nan")
            lines.append(
                f"| {adj} | {est} | {n:,} | {v:.4e} | {(v - true) / true:+.1e} | {z:+.2f} | {se:.2e} | "
                f"{var[est]:.3e} | {emp:,.1f}x | {ex:,.1f}x | {dt:.1f} |"
            )
        lines.append(
            f"| {adj} | simple, exact | — | {true:.4e} | — | — | {math.sqrt(exact_var / S['fig6_simple']):.2e} "
            f"(at {S['fig6_simple']:,}) | {exact_var:.3e} | — | 1x | — |"
        )
        record.setdefault("fig6_exact_simple_var", {})[adj] = exact_var
        notes.append(
            f"{adj}: simple's {S['fig6_simple']:,} samples expect {p_tail * S['fig6_simple']:.1f} draws with L > eps."
        )
    lines += [""] + [f"* {x}" for x in notes] + [""]
    lines += ["| adjacency | estimator | simple (empirical) / this | simple (exact) / this |", "|---|---|---|---|"]
    for (adj, est), (emp, ex) in ratios.items():
        lines.append(f"| {adj} | {est} | {emp:,.0f}x | {ex:,.0f}x |")
        summary.append(
            (
                f"1. variance ratio simple / {est}, Fig. 6 setting, {adj}",
                ">= 100x",
                f"{ex:,.0f}x vs exact simple variance ({emp:,.0f}x vs simple's own "
                f"{S['fig6_simple']:.0e}-sample estimate)",
                met(ex >= 100),
            )
        )
    lines.append("")
    record["fig6_true"] = true_by_adj


# -- 2. delta ~ 1e-10 ----------------------------------------------------------------------------
def section_tiny_delta(S, lines, summary, record):
    row = next(r for r in reference_values.ROWS if r["case"] == "psg_1.0_0.01_2000" and r["epsilon"] == 4.0)
    eps, steps, ref = row["epsilon"], row["steps"], row["delta"]
    # add_or_remove is the larger of the two directions: sample only the dominating one (half the cost)
    by_dir = {
        d: float(
            jaxdp.delta_for_epsilon(
                PSG(row["sigma"], row["q"], adjacency=d), epsilon=eps, num_steps=steps, method="characteristic"
            )
        )
        for d in ["remove", "add"]
    }
    dom = max(by_dir, key=by_dir.get)
    m = PSG(row["sigma"], row["q"], adjacency=dom)
    lines += [
        "## 2. delta ~ 1e-10",
        "",
        f"Reference row `{row['case']}` (tests/reference_values.py): PSG sigma = {row['sigma']}, q = {row['q']}, "
        f"{steps} steps, eps = {eps}, add_or_remove, reference delta = {ref:.6e}.  The characteristic accountant "
        f"gives {by_dir['remove']:.6e} for `remove` and {by_dir['add']:.6e} for `add`, so add_or_remove's delta is "
        f'the `{dom}` direction\'s: only that direction is sampled (`adjacency="{dom}"`; the add_or_remove call '
        "would sample both and take the larger, at twice the cost).",
        "",
        "| estimator | samples | delta estimate | rel. err vs reference | z | stderr | rel. stderr | "
        "95% interval | seconds (incl. compile) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    out = {}
    for i, (est, n) in enumerate([("tilted", S["tiny_tilted"]), ("simple", S["tiny_simple"])]):
        log(f"[2] {est} n={n} steps={steps}")
        r, dt = clock(
            lambda est=est, n=n, i=i: jaxdp.montecarlo_delta(
                m, epsilon=eps, num_steps=steps, key=key(200 + i), num_samples=n, estimator=est
            )
        )
        v, se = float(r.value), float(r.stderr)
        rse = se / v if v > 0 else float("nan")
        z = (v - ref) / se if se > 0 else float("nan")
        out[est] = dict(
            samples=n, value=v, stderr=se, rel_stderr=rse, seconds=dt, ci=(float(r.ci_low), float(r.ci_high))
        )
        lines.append(
            f"| {est} | {n:,} | {v:.4e} | {(v - ref) / ref:+.1e} | {z:+.2f} | {se:.2e} | "
            f"{'n/a' if math.isnan(rse) else f'{100 * rse:.2f}%'} | "
            f"[{float(r.ci_low):.3e}, {float(r.ci_high):.3e}] | {dt:.1f} |"
        )
    lines += [
        "",
        f"Simple Monte Carlo with {out['simple']['samples']:,} samples returns {out['simple']['value']:.3g} "
        "(no sampled loss exceeds eps: an event of probability ~1e-10 is not seen in "
        f"{out['simple']['samples']:.0e} draws).",
        "",
    ]
    t = out["tilted"]
    summary.append(
        (
            f"2. rel. stderr of tilted at delta = 7.3e-10 ({t['samples']:.0e} samples)",
            "<= 2%",
            f"{100 * t['rel_stderr']:.2f}% ({t['seconds']:.0f} s)",
            met(t["rel_stderr"] <= 0.02),
        )
    )
    summary.append(
        (
            f"2. simple MC ({out['simple']['samples']:.0e} samples) at the same delta",
            "sees no event (0)",
            f"{out['simple']['value']:.3g}",
            met(out["simple"]["value"] == 0.0),
        )
    )
    record["tiny_delta"] = dict(reference=ref, **out)


# -- 3. epsilon(delta) against the reference rows ------------------------------------------------
def section_epsilon_rows(S, lines, summary, record):
    rows = [
        r
        for r in reference_values.ROWS
        if r["query"] == "epsilon"
        and r["steps"] <= 2000
        and (r["mechanism"] == "poisson_gaussian" or r.get("group_size", 1) <= 2)
    ]
    if S["eps_rows"]:
        rows = rows[: S["eps_rows"]]
    lines += [
        "## 3. epsilon(delta) against the reference rows",
        "",
        "Every epsilon row of `tests/reference_values.py` with at most 2000 steps (add_or_remove; the",
        f'group rows with group size <= 2).  `montecarlo_epsilon(..., estimator="tilted")` with '
        f"{S['eps_samples']:,} samples per PSG row and {S['eps_group_samples']:,} per group row (not 10^6, to keep "
        "the whole run near 15 minutes; see the estimate below the table).",
        "",
        "| case | group | steps | delta | reference eps | MC eps | rel. err | stderr | 95% interval | covers | "
        "seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    worst, covered, res = 0.0, 0, []
    for i, r in enumerate(rows):
        n = S["eps_group_samples"] if r["mechanism"] == "poisson_gaussian_group" else S["eps_samples"]
        log(f"[3] {r['case']} g={r.get('group_size', 1)} steps={r['steps']} n={n}")
        m = mechanism_for_row(r)
        e, dt = clock(
            lambda m=m, r=r, n=n, i=i: jaxdp.montecarlo_epsilon(
                m, delta=r["delta"], num_steps=r["steps"], key=key(300 + i), num_samples=n
            )
        )
        v, se, lo, hi = float(e.value), float(e.stderr), float(e.ci_low), float(e.ci_high)
        ref = r["epsilon"]
        err = (v - ref) / ref
        cov = lo <= ref <= hi
        worst = max(worst, abs(err)) if math.isfinite(err) else float("inf")
        covered += cov
        res.append(
            dict(
                case=r["case"],
                group_size=r.get("group_size", 1),
                steps=r["steps"],
                delta=r["delta"],
                reference=ref,
                value=v,
                stderr=se,
                ci=(lo, hi),
                rel_err=err,
                covers=cov,
                samples=n,
                seconds=dt,
            )
        )
        lines.append(
            f"| {r['case']} | {r.get('group_size', 1)} | {r['steps']} | {r['delta']:.0e} | {ref:.6f} | "
            f"{v:.6f} | {err:+.1e} | {se:.1e} | [{lo:.5f}, {hi:.5f}] | {'yes' if cov else 'no'} | "
            f"{dt:.1f} |"
        )
    at_1e6 = sum(x["seconds"] * 1e6 / x["samples"] for x in res)
    lines += [
        "",
        f"Worst relative error {worst:.1e}; interval covers the reference on {covered}/{len(rows)} rows.",
        f"(seconds include each shape's compilation; 10^6 samples on every row would take ~{at_1e6 / 60:.0f} min "
        "here, scaling these times.)",
        "",
    ]
    summary.append(
        (
            f"3. epsilon rel. err, {len(rows)} reference rows (<= 2000 steps)",
            "within 1%",
            f"worst {100 * worst:.3f}%",
            met(worst <= 0.01),
        )
    )
    summary.append(("3. 95% interval covers the reference eps", "(reported)", f"{covered}/{len(rows)} rows", "—"))
    record["epsilon_rows"] = res


# -- 4. coverage ---------------------------------------------------------------------------------
def section_coverage(S, lines, summary, record):
    sigma, q, steps, delta = 1.0, 0.01, 500, 1e-5
    m = PSG(sigma, q, adjacency="remove")
    ref = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=steps, method="characteristic"))
    n, seeds = S["cover_samples"], S["cover_seeds"]
    zs, hits, widths = [], 0, []
    t0 = time.perf_counter()
    for s in range(seeds):
        if s % 10 == 0:
            log(f"[4] seed {s}/{seeds}")
        e = jaxdp.montecarlo_epsilon(m, delta=delta, num_steps=steps, key=key(1000 + s), num_samples=n)
        v, se, lo, hi = float(e.value), float(e.stderr), float(e.ci_low), float(e.ci_high)
        zs.append((v - ref) / se)
        hits += lo <= ref <= hi
        widths.append(hi - lo)
    dt = time.perf_counter() - t0
    frac = hits / seeds
    zs = np.array(zs)
    binom = math.sqrt(0.95 * 0.05 / seeds)
    lines += [
        "## 4. Coverage of the 95% interval",
        "",
        f"`montecarlo_epsilon`, PSG sigma = {sigma}, q = {q}, {steps} steps, delta = {delta:g}, adjacency `remove`",
        f'(one direction, to halve the cost), `"tilted"`, {n:,} samples, {seeds} seeds.  Reference epsilon '
        f'{ref:.6f} (jaxdp `method="characteristic"`).',
        "",
        "| seeds | covered | coverage | mean z | sd of z | mean interval width | seconds (all seeds) |",
        "|---|---|---|---|---|---|---|",
        f"| {seeds} | {hits} | {100 * frac:.0f}% | {zs.mean():+.2f} | {zs.std(ddof=1):.2f} | {np.mean(widths):.2e} | "
        f"{dt:.0f} |",
        "",
        f"With {seeds} seeds the coverage itself has a binomial standard error of ~{100 * binom:.0f} points at 95%.",
        "",
    ]
    summary.append(
        (
            f"4. coverage of the 95% interval ({seeds} seeds)",
            "90-99%",
            f"{100 * frac:.0f}% (mean z {zs.mean():+.2f})",
            met(0.90 <= frac <= 0.99),
        )
    )
    record["coverage"] = dict(reference=ref, seeds=seeds, samples=n, covered=hits, z=zs.tolist(), seconds=dt)


# -- 5. throughput -------------------------------------------------------------------------------
def section_throughput(S, lines, summary, record):
    steps = S["tp_steps"]
    m = PSG(1.0, 0.01, adjacency="remove")
    lines += [
        "## 5. Throughput",
        "",
        f"Sampled steps per second = samples x steps / seconds of the second call (the first compiles), "
        f"`montecarlo_delta`, PSG sigma = 1, q = 0.01, eps = 2, {steps} steps, adjacency `remove` (one direction; "
        "`add_or_remove` samples both and costs twice as much), float64.  Naive: "
        "`jax.jit(lambda k: m.sample_privacy_loss(k, (B, T)).sum(1))` with x64 enabled (the whole (B, T) "
        "array in memory; only the smallest size).",
        "",
        "| path | samples | first call (compile + run) s | second call s | steps / s |",
        "|---|---|---|---|---|",
    ]
    best = {}
    res = []
    for est in ["simple", "tilted", "tilted-one"]:
        for j, b in enumerate(S["tp_samples"]):
            log(f"[5] {est} B={b}")

            def call(seed, est=est, b=b):
                return jaxdp.montecarlo_delta(
                    m, epsilon=2.0, num_steps=steps, key=key(seed), num_samples=b, estimator=est
                ).value

            _, t1 = clock(lambda call=call, j=j: call(500 + j))
            _, t2 = clock(lambda call=call, j=j: call(600 + j))
            rate = b * steps / t2
            best[est] = max(best.get(est, 0.0), rate)
            res.append(dict(path=est, samples=b, first=t1, second=t2, rate=rate))
            lines.append(f"| {est} | {b:,} | {t1:.2f} | {t2:.2f} | {rate:.2e} |")
    prev = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        for b in S["naive_samples"]:
            log(f"[5] naive B={b}")
            f = jax.jit(lambda k, b=b: m.sample_privacy_loss(k, (b, steps)).sum(1))
            _, t1 = clock(lambda f=f: f(key(700)))
            _, t2 = clock(lambda f=f: f(key(701)))
            rate = b * steps / t2
            best["naive"] = max(best.get("naive", 0.0), rate)
            res.append(dict(path="naive", samples=b, first=t1, second=t2, rate=rate))
            lines.append(f"| naive JAX sampling (x64) | {b:,} | {t1:.2f} | {t2:.2f} | {rate:.2e} |")
    finally:
        jax.config.update("jax_enable_x64", prev)
    lines += [
        "",
        f"Devices: {', '.join(str(d) for d in jax.devices())}.  No GPU was lent to this session; the same "
        "script runs unchanged on a GPU (chunks are spread over all local devices).",
        "",
    ]
    for est in ["simple", "tilted", "tilted-one"]:
        summary.append(
            (
                f"5. throughput, {est} ({steps} steps, best of the sizes)",
                ">= 2e7 steps/s",
                f"{best[est]:.2e}",
                met(best[est] >= 2e7),
            )
        )
    summary.append(("5. naive JAX sampling, same setting", "(issue: 7e6)", f"{best['naive']:.2e}", "—"))
    record["throughput"] = res


# -- 6. online curve vs per-step prv_accountant queries ------------------------------------------
def section_online(S, lines, summary, record):
    sigma, q, delta, K, n = 1.0, 0.01, 1e-5, S["online_steps"], S["online_samples"]
    m = PSG(sigma, q)
    log(f"[6] online_epsilon K={K} n={n} (first call)")
    _, t1 = clock(lambda: online_epsilon(m, delta=delta, max_steps=K, key=key(800), num_samples=n))
    log("[6] online_epsilon (second call)")
    c, t2 = clock(lambda: online_epsilon(m, delta=delta, max_steps=K, key=key(801), num_samples=n))
    eps_curve, se_curve = np.asarray(c.epsilon), np.asarray(c.stderr)
    lo_curve, hi_curve = np.asarray(c.ci_low), np.asarray(c.ci_high)

    ks = [k for k in S["online_ks"] if k <= K]
    errs = []
    acc_rows = []
    for k in ks:
        ref = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=k, method="characteristic"))
        v = float(eps_curve[k - 1])
        se = float(se_curve[k - 1])
        err = (v - ref) / ref
        errs.append(abs(err))
        acc_rows.append((k, ref, v, err, se, float(lo_curve[k - 1]) <= ref <= float(hi_curve[k - 1])))

    # prv_accountant: one accountant sized for K steps, one compute_epsilon query per step count
    from prv_accountant import PoissonSubsampledGaussianMechanism, PRVAccountant

    log("[6] prv_accountant build")
    t0 = time.perf_counter()
    acc = PRVAccountant(
        prvs=[PoissonSubsampledGaussianMechanism(noise_multiplier=sigma, sampling_probability=q)],
        max_self_compositions=[K],
        eps_error=1e-3,
        delta_error=1e-10,
    )
    t_build = time.perf_counter() - t0
    # ~prv_points step counts spread over 1..K, the accuracy table's ks among them (duplicates merged)
    spread = sorted(set(np.linspace(1, K, S["prv_points"] - len(ks)).round().astype(int).tolist()) | set(ks))
    prv_eps, q_times = {}, []
    for i, k in enumerate(spread):
        if i % 10 == 0:
            log(f"[6] prv query {i}/{len(spread)} (k={k})")
        t0 = time.perf_counter()
        _, est, _ = acc.compute_epsilon(delta=delta, num_self_compositions=[int(k)])
        q_times.append(time.perf_counter() - t0)
        prv_eps[int(k)] = est
    per_query = float(np.mean(q_times))
    measured_all = len(spread) >= K
    prv_total = t_build + (sum(q_times) if measured_all else K * per_query)
    label = "measured" if measured_all else f"extrapolated from {len(spread)} step counts"
    lines += [
        "## 6. Online curve vs per-step prv_accountant queries",
        "",
        f"`{ONLINE_FROM}`, PSG sigma = {sigma}, q = {q}, delta = {delta:g}, "
        f'add_or_remove, K = {K} steps, {n:,} sample paths, `"tilted"`: epsilon after every step in one jitted '
        "call.  prv_accountant 0.2: one `PRVAccountant(PoissonSubsampledGaussianMechanism, "
        f"max_self_compositions=[{K}], eps_error=1e-3, delta_error=1e-10)` and one `compute_epsilon` query per "
        f"step count ({len(spread)} step counts spread over 1..{K} timed; the {K}-query total is "
        + ("measured)." if measured_all else f"build time + {K} x the mean query time, extrapolated linearly)."),
        "",
        "| path | seconds |",
        "|---|---|",
        f"| online_epsilon, first call (compile + run) | {t1:.1f} |",
        f"| online_epsilon, second call | {t2:.1f} |",
        f"| prv_accountant, build | {t_build:.1f} |",
        f"| prv_accountant, one query (mean of {len(spread)}) | {per_query:.2f} |",
        f"| prv_accountant, {K} queries ({label}) | {prv_total:,.0f} |",
        "",
        f"Ratio prv_accountant / online_epsilon: {prv_total / t2:,.0f}x against the second call, "
        f"{prv_total / t1:,.0f}x against the first (compiling) call.",
        "",
        'Accuracy of the curve against jaxdp `method="characteristic"` (and prv_accountant\'s estimate):',
        "",
        "| step k | characteristic eps | online eps | rel. err | stderr | 95% interval covers | prv_accountant eps |",
        "|---|---|---|---|---|---|---|",
    ]
    for k, ref, v, err, se, cov in acc_rows:
        pv = prv_eps.get(k)
        lines.append(
            f"| {k} | {ref:.6f} | {v:.6f} | {err:+.1e} | {se:.1e} | {'yes' if cov else 'no'} | "
            f"{'—' if pv is None else f'{pv:.6f}'} |"
        )
    worst = max(errs) if errs else float("nan")
    max_z = max(abs(v - ref) / se for k, ref, v, err, se, cov in acc_rows) if acc_rows else float("nan")
    lines += ["", f"Max relative error at k in {ks}: {worst:.1e}.", ""]
    summary.append(
        (
            f"6. online curve ({K} steps) vs {K} prv_accountant queries",
            "(faster)",
            f"{prv_total / t2:,.0f}x faster ({t2:.0f} s vs {prv_total:,.0f} s, {label})",
            met(prv_total > t2),
        )
    )
    summary.append(
        (
            f"6. online curve max rel. err vs characteristic at k in {ks}",
            "(reported; no target)",
            f"{worst:.1e} (max abs z {max_z:.1f})",
            "—",
        )
    )
    record["online"] = dict(
        first=t1,
        second=t2,
        prv_build=t_build,
        prv_per_query=per_query,
        prv_total=prv_total,
        prv_label=label,
        spread=spread,
        prv_eps=prv_eps,
        accuracy=[
            dict(k=k, ref=ref, value=v, rel_err=err, stderr=se, covers=cov) for k, ref, v, err, se, cov in acc_rows
        ],
    )


# -- 7. EVR (estimate-verify-release) ------------------------------------------------------------
def section_evr(S, lines, summary, record):
    # ===================== EVR: TO BE FILLED IN once jaxdp.evr exists =====================
    lines += ["## 7. EVR (estimate-verify-release)", ""]
    if not hasattr(jaxdp, "evr"):
        log("[7] EVR: not yet measured (jaxdp.evr does not exist)")
        lines += ["Not yet measured: `jaxdp.evr` does not exist on this commit.", ""]
        summary.append(("7. EVR", "(see issue)", "not yet measured", "—"))
        record["evr"] = None
        return
    # placeholder measurement (one cheap call; the engineer will replace it with the EVR targets):
    # two candidates at the true delta and at half of it, 100 steps, at most 10^6 samples per direction
    m, steps, eps = PSG(1.0, 0.01), 100, 0.1
    true = float(jaxdp.delta_for_epsilon(m, epsilon=eps, num_steps=steps, method="characteristic"))
    cands = [true, 0.5 * true]
    try:
        log("[7] evr (placeholder call)")
        out, dt = clock(
            lambda: jaxdp.evr(m, num_steps=steps, epsilon=eps, delta_est=cands, key=key(900), max_samples=1_000_000)
        )
        acc = [bool(x) for x in np.asarray(out.accepted)]
        smp = [int(x) for x in np.asarray(out.samples)]
        lines += [
            f"Placeholder (to be filled in): `jaxdp.evr(PSG(1, 0.01), num_steps={steps}, epsilon={eps}, "
            f"delta_est=[true, true/2], max_samples=10^6)` with true delta {true:.4e} (characteristic): "
            f"accepted {acc}, samples {smp}, estimators {out.estimators}, {dt:.1f} s (incl. compile).",
            "",
        ]
        summary.append(("7. EVR", "(see issue)", f"placeholder only: accepted {acc} for [true, true/2]", "—"))
        record["evr"] = dict(true=true, candidates=cands, accepted=acc, samples=smp, seconds=dt)
    except Exception as err:
        lines += [f"`jaxdp.evr` exists but the placeholder call failed: `{type(err).__name__}: {err}`.", ""]
        summary.append(("7. EVR", "(see issue)", "not yet measured (call failed)", "—"))
        record["evr"] = dict(error=f"{type(err).__name__}: {err}")
    # =====================================================================================


def git(*args):
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke run; numbers meaningless)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "montecarlo.md"))
    ap.add_argument("--json", default=None, help="raw numbers (default: --out with .json)")
    ap.add_argument("--only", default=None, help="comma-separated section numbers to run (debugging)")
    a = ap.parse_args()
    S = sizes(a.quick)
    only = set(a.only.split(",")) if a.only else None
    commit = git("rev-parse", "--short", "HEAD")
    dirty = git("status", "--porcelain", "--", "jaxdp")
    load0 = os.getloadavg()
    t_start = time.perf_counter()
    lines = [
        "# Monte Carlo accountant: variance, accuracy, coverage, throughput, online curve",
        "",
        f"Machine: this project's {os.cpu_count()}-core CPU ({platform.machine()}), no GPU (none was lent to this "
        f"session); JAX {jax.__version__}, devices {[str(d) for d in jax.devices()]}.  "
        f"Date: {datetime.date.today().isoformat()}.  jaxdp commit `{commit}`"
        + (
            " (plus uncommitted changes under jaxdp/: " + ", ".join(x.split()[-1] for x in dirty.splitlines()) + ")"
            if dirty and dirty != "unknown"
            else ""
        )
        + ".",
        "",
        "Run with `nice -n 10` while another engineer's tests shared the two cores (load average "
        f"{load0[0]:.2f} at the start): timings are conservative and somewhat noisy.  References: "
        "`tests/reference_values.py` (copied from the shared oracle table) where it has a row, otherwise "
        'jaxdp\'s `method="characteristic"` accountant (agrees with prv_accountant / dp_accounting to ~1e-6).  '
        "All Monte Carlo numbers are estimates (not bounds) with standard errors.",
        "",
    ]
    if a.quick:
        lines += ["**`--quick` smoke run: tiny sizes, the numbers are not measurements.**", ""]
    summary, record = [], dict(commit=commit, quick=a.quick, date=datetime.date.today().isoformat())
    sections = [
        ("1", section_fig6),
        ("2", section_tiny_delta),
        ("3", section_epsilon_rows),
        ("4", section_coverage),
        ("5", section_throughput),
        ("6", section_online),
        ("7", section_evr),
    ]
    body = []
    for num, fn in sections:
        if only and num not in only:
            continue
        t0 = time.perf_counter()
        fn(S, body, summary, record)
        log(f"section {num}: {time.perf_counter() - t0:.0f} s")
        record.setdefault("section_seconds", {})[num] = time.perf_counter() - t0
    total = time.perf_counter() - t_start
    lines += ["## Summary: targets vs measured", "", "| target | issue's target | measured | |", "|---|---|---|---|"]
    lines += [f"| {t} | {goal} | {got} | {ok} |" for t, goal, got, ok in summary]
    lines += ["", f"Whole run: {total / 60:.1f} min wall time (load average at the end {os.getloadavg()[0]:.2f}).", ""]
    text = "\n".join(lines + body) + "\n"
    with open(a.out, "w") as fh:
        fh.write(text)
    jpath = a.json or os.path.splitext(a.out)[0] + ".json"
    record["total_seconds"] = total
    with open(jpath, "w") as fh:
        json.dump(record, fh, indent=1, default=lambda x: x if not isinstance(x, np.generic) else x.item())
    print(text)


if __name__ == "__main__":
    main()
