"""Estimate-verify-release at the deltas DP-SGD is released at (issue 46): proven sample counts, verification
times, false-accept and false-reject rates, and a calibration verified by EVR beside the certified one.

    python benchmarks/bench_evr.py [--trials 200] [--psg-trials 200] [--out benchmarks/results/evr.md]

Sections (one process, this machine):

1. PSG sigma 1, q 0.01, 1,000 steps (add or remove), epsilon where delta ~ 1e-6 and ~ 1e-8: the proven count of
   every estimator the verifier knows (``jaxdp.evr_plan``), the ratio simple / chosen, and the wall time of one
   verification with ``delta_est`` = the true delta (after compilation: the second call, a new key);
2. the seed paper's Fig. 3 setting (1,200 composed Gaussians, sigma 70, tau 0.99, epsilon 2): the same;
3. false-accept rate (``delta_est`` 10 % below the truth, tau 0.9: ``delta_est / tau`` is the truth, the
   worst case of the guarantee) and false-reject rate (``delta_est`` 20 % above it), independent trials, a
   fresh key each, at delta ~ 1e-6: a composition of Gaussians and a Poisson-subsampled Gaussian (20 steps);
4. calibrating sigma for (epsilon, delta) = (3, 1e-5), q 0.01, 1,000 steps, with ``certify="evr"`` beside the
   default certified calibration: sigma and wall time of each (cold: the first call of each in this process).

True deltas: the closed form for Gaussians, ``method="characteristic"`` for the subsampled Gaussian (~1e-6
relative; the trials' margins are 10 % and 20 %).  Timings are wall seconds on this machine's CPU.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import subprocess
import sys
import time

import jax
import numpy as np
from scipy.stats import beta, norm

import jaxdp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _timing import once  # noqa: E402

NOTE_COUNTS = (
    'The one verification at delta ~1e-6 draws ~5e8 steps (~495k samples of 1,000 steps): the 5 s target '
    'needs ~1e8 sampled steps/s. On this 2-core CPU the exact tilt samples at about the simple '
    "estimator's rate (per step a uniform, compared with the few cumulative probabilities of the binomial"
    ' component, and a normal), so the target needs an accelerator (none was lent to this session; '
    '`benchmarks/bench_gpu.py`). Until 7330c9c the component was picked by a binary search per draw, ~40 '
    '% of a step. Measured the same hour before and after that commit: the sampler alone '
    '(`montecarlo_delta`, 65,536 samples of the setting above, remove) 1.9e7 -> 3.1e7 steps/s, simple '
    '2.8e7 -> 3.3e7 in the same runs; one `jaxdp.evr` call at delta ~1e-6 (plan, both directions, the add'
    " one a few samples) 27.7 -> 21.4 s. The table's rate is the whole call's. A composition of Gaussians"
    " draws its output's sum in one normal per part, hence the Fig. 3 row's short time."
)
NOTE_TRIALS = (
    "0 wrong verdicts in 200 trials is what the design predicts (the estimate's standard error at the "
    "proven count is ~1/5 of the offset), but the exact 95 % interval still reaches 1.8 %: 200 trials "
    "show the rates are small, not that the false-accept rate is below its design value of ~1e-6, which "
    "is proven (Thm 3.2 with `docs/evr_tilt.md` section 2), not measured.  In the subsampled rows the add"
    " direction is verified by the simple estimator, whose count there is smaller (the add tilt is capped"
    " so that rejection keeps most draws)."
)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def gaussian_delta(mu, eps):
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def gaussian_eps(mu, delta):
    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gaussian_delta(mu, mid) > delta else (lo, mid)
    return 0.5 * (lo + hi)


def clopper_pearson(k, n, level=0.95):
    a = (1.0 - level) / 2.0
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1.0 - a, k + 1, n - k))
    return lo, hi



def plan_row(name, mech, steps, eps, delta, tau, lines, record, verify=True):
    plan, t_plan = once(lambda: jaxdp.evr_plan(mech, num_steps=steps, epsilon=eps, delta_est=delta, tau=tau))
    counts = plan.counts
    decide = int(np.argmax([int(np.max(s)) for s in plan.samples]))  # the direction needing most samples
    chosen = plan.estimators[decide]
    c = counts[decide]
    ratio = c["simple"] / c[chosen]
    row = dict(setting=name, epsilon=eps, delta=delta, tau=tau, plan=str(plan), counts=counts, ratio=ratio)
    secs = first = float("nan")
    accepted = None
    if verify:
        log(f"[{name}] verifying (first call)")
        v1, first = once(
            lambda: jaxdp.evr(mech, num_steps=steps, epsilon=eps, delta_est=delta, tau=tau, key=jax.random.key(1))
        )
        log(f"[{name}] verifying (second call)")
        v, secs = once(
            lambda: jaxdp.evr(mech, num_steps=steps, epsilon=eps, delta_est=delta, tau=tau, key=jax.random.key(2))
        )
        accepted = (bool(v1.accepted), bool(v.accepted))
        total = int(v.samples)
        row.update(
            seconds=secs, first_seconds=first, samples=total, accepted=accepted, steps_per_second=total * steps / secs
        )
    others = ", ".join(f"{k} {v:.3g}" for k, v in c.items())
    lines.append(
        f"| {name} | {eps:.6g} | {delta:.3e} | {tau} | {chosen} ({plan.directions[decide]}) | {c[chosen]:,} | "
        f"{others} | **{ratio:.3g}x** | {t_plan:.1f} | {first:.1f} | {secs:.1f} | {accepted} |"
    )
    record.append(row)


def section_counts(a, lines, summary, record):
    lines += [
        "## 1-2. Proven sample counts and one verification",
        "",
        "`jaxdp.evr_plan` gives each estimator's proven count (Bennett's inequality with its second-moment bound; the "
        "exact tilt's is `b delta_est / tau`, `docs/evr_tilt.md`); `jaxdp.evr` draws the smallest.  `delta_est` is "
        "the true delta, so the candidate should be accepted.  Columns: the chosen estimator and the direction "
        "that needs most samples; its count; every estimator's count there; simple / chosen; seconds to plan "
        "(cold), to verify the first time (compiling) and the second time (a new key).",
        "",
        "| setting | epsilon | delta_est | tau | chosen | proven count | all counts | ratio | plan s | first s | "
        "verify s | accepted |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rec = []
    psg = jaxdp.PoissonSubsampledGaussian(1.0, 0.01)
    for target in (1e-6, 1e-8):
        eps = float(jaxdp.epsilon_for_delta(psg, delta=target, num_steps=1000, method="certified"))
        true = float(jaxdp.delta_for_epsilon(psg, epsilon=eps, num_steps=1000, method="characteristic"))
        plan_row(
            f"PSG sigma 1, q 0.01, 1000 steps, delta ~{target:g}",
            psg,
            1000,
            eps,
            true,
            0.9,
            lines,
            rec,
            verify=not a.no_psg_verify,
        )
    mu = math.sqrt(1200) / 70.0
    true = gaussian_delta(mu, 2.0)
    plan_row("seed paper Fig. 3: 1200 x Gaussian sigma 70", jaxdp.Gaussian(70.0), 1200, 2.0, true, 0.99, lines, rec)
    lines += ["", NOTE_COUNTS, ""]
    record["counts"] = rec
    at6 = rec[0]
    summary.append(
        (
            "count ratio simple / exact tilt at delta ~1e-6 (PSG)",
            ">= 1,000x",
            f"{at6['ratio']:.3g}x",
            "met" if at6["ratio"] >= 1000 else "**not met**",
        )
    )
    if "seconds" in at6:
        summary.append(
            (
                "one verification at delta ~1e-6 (PSG, 2 CPU cores, after compilation)",
                "<= 5 s",
                f"{at6['seconds']:.1f} s ({at6['samples']:,} samples, {at6['steps_per_second']:.3g} sampled steps/s)",
                "met" if at6["seconds"] <= 5 else "**not met**",
            )
        )
    fig3 = rec[-1]
    summary.append(
        (
            "seed paper Fig. 3 setting: proven count, CPU time",
            "(report)",
            f"{fig3['counts'][0]['tilted-exact']:,} samples (simple: {fig3['counts'][0]['simple']:.3g}); "
            f"{fig3['seconds']:.1f} s",
            "",
        )
    )


def trials(name, mech, steps, eps, true, n, lines, rec, tau=0.9):
    for case, dest, wrong_if in (("false accept", 0.9 * true, True), ("false reject", 1.2 * true, False)):
        design = dest / tau if case == "false accept" else 0.05
        wrong, times, smp, est = 0, [], 0, ()
        log(f"[3] {name}: {case}, {n} trials")
        for t in range(n):
            v, dt = once(
                lambda t=t, dest=dest: jaxdp.evr(
                    mech, num_steps=steps, epsilon=eps, delta_est=dest, tau=tau, key=jax.random.key(50_000 + t)
                )
            )
            if t:
                times.append(dt)
            wrong += int(bool(v.accepted) == wrong_if)
            smp, est = int(v.samples), v.estimators
        lo, hi = clopper_pearson(wrong, n)
        sec = float(np.mean(times)) if times else float("nan")
        lines.append(
            f"| {name} | {true:.4e} | {case} | {dest:.4e} | {design:.3g} | {n} | {wrong} | {wrong / n:.2%} | "
            f"[{lo:.2%}, {hi:.2%}] | {smp:,} | {', '.join(est)} | {sec:.2f} |"
        )
        rec.append(
            dict(
                setting=name,
                case=case,
                true=true,
                delta_est=dest,
                design=design,
                trials=n,
                wrong=wrong,
                samples=smp,
                seconds=sec,
            )
        )


def section_trials(a, lines, summary, record):
    lines += [
        "## 3. False-accept and false-reject rates at delta ~ 1e-6",
        "",
        "Independent trials, one candidate per call, a fresh key each, tau 0.9.  **False accept**: `delta_est` 10 % "
        "below the truth accepted (then `delta_est / tau` is the truth: the boundary of Thm 3.2, where the rate is "
        "at most `delta_est / tau` ~ 1e-6).  "
        "**False reject**: `delta_est` 20 % above the truth rejected (goal <= 5 %).",
        "",
        "| setting | true delta | case | delta_est | design rate | trials | wrong | rate | 95 % CP interval | "
        "samples / call | estimators | s / call |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rec = []
    mu = 1.0
    eps = gaussian_eps(mu, 1e-6)
    trials(
        f"Gaussian mu 1 (16 x sigma 4), eps {eps:.4f}",
        jaxdp.Gaussian(4.0),
        16,
        eps,
        gaussian_delta(mu, eps),
        a.trials,
        lines,
        rec,
    )
    if a.psg_trials:
        psg = jaxdp.PoissonSubsampledGaussian(1.0, 0.2)
        eps = float(jaxdp.epsilon_for_delta(psg, delta=1e-6, num_steps=20, method="certified"))
        true = float(jaxdp.delta_for_epsilon(psg, epsilon=eps, num_steps=20, method="characteristic"))
        trials(f"PSG sigma 1, q 0.2, 20 steps, eps {eps:.4f}", psg, 20, eps, true, a.psg_trials, lines, rec)
    lines += ["", NOTE_TRIALS, ""]
    record["trials"] = rec
    fa = [r for r in rec if r["case"] == "false accept"]
    fr = [r for r in rec if r["case"] == "false reject"]
    summary.append(
        (
            "false-accept rate at delta ~1e-6",
            "<= design rate (~1e-6)",
            "; ".join(f"{r['wrong']}/{r['trials']} ({r['setting'].split(',')[0]})" for r in fa),
            "met"
            if all(r["wrong"] == 0 for r in fa) and all(r["trials"] >= 200 for r in fa)
            else "**not met** (fewer than 200 trials or an accept)",
        )
    )
    summary.append(
        (
            "false-reject rate at delta ~1e-6",
            "<= 5 %",
            "; ".join(f"{r['wrong']}/{r['trials']} ({r['setting'].split(',')[0]})" for r in fr),
            "met"
            if all(r["wrong"] / r["trials"] <= 0.05 for r in fr) and all(r["trials"] >= 200 for r in fr)
            else "**not met** (fewer than 200 trials or too many rejects)",
        )
    )


def section_calibration(a, lines, summary, record):
    lines += [
        "## 4. Calibrating sigma for (3, 1e-5), q 0.01, 1,000 steps",
        "",
        "| certify | sigma | status | certified epsilon | wall s (cold in this process) |",
        "|---|---|---|---|---|",
    ]
    rec = []
    common = dict(target_epsilon=3.0, delta=1e-5, num_steps=1000, sampling_prob=0.01)
    for label, kw in (("certified (default)", {}), ("evr", dict(certify="evr", key=jax.random.key(7)))):
        log(f"[4] calibrating with {label}")
        r, sec = once(lambda kw=kw: jaxdp.calibrate_noise_multiplier(**common, **kw))
        lines.append(
            f"| {label} | {float(r.noise_multiplier):.6f} | {int(r.status)} | "
            f"{float(r.epsilon_certified):.6g} | {sec:.1f} |"
        )
        rec.append(dict(certify=label, sigma=float(r.noise_multiplier), status=int(r.status), seconds=sec))
    lines.append("")
    record["calibration"] = rec
    summary.append(
        (
            "calibration (3, 1e-5): sigma and time, evr beside certified",
            "(report)",
            "; ".join(f"{r['certify']}: sigma {r['sigma']:.5f}, {r['seconds']:.0f} s" for r in rec),
            "",
        )
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--psg-trials", type=int, default=200)
    ap.add_argument("--no-psg-verify", action="store_true", help="section 1: counts only for the PSG rows")
    ap.add_argument("--only", default="1,3,4")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "evr.md"))
    a = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE).stdout
    start = time.perf_counter()
    lines, summary, record = [], [], {}
    only = set(a.only.split(","))
    if "1" in only:
        section_counts(a, lines, summary, record)
    if "3" in only:
        section_trials(a, lines, summary, record)
    if "4" in only:
        section_calibration(a, lines, summary, record)
    head = [
        "# Estimate-verify-release with the exact loss tilt (issue 46)",
        "",
        f"{datetime.date.today().isoformat()}, jaxdp `{commit.strip()}`, {os.cpu_count()} CPU cores "
        f"({platform.machine()}), no GPU; JAX {jax.__version__}.  `python benchmarks/bench_evr.py "
        f"{' '.join(sys.argv[1:])}` took {(time.perf_counter() - start) / 60:.1f} min.",
        "",
        "## Summary: targets vs measured",
        "",
        "| target | issue's target | measured | |",
        "|---|---|---|---|",
        *[f"| {t} | {g} | {m} | {ok} |" for t, g, m, ok in summary],
        "",
    ]
    with open(a.out, "w") as f:
        f.write("\n".join(head + lines) + "\n")
    print("\n".join(head + lines))


if __name__ == "__main__":
    main()
