"""``jaxdp verify`` (estimate-verify-release) and ``jaxdp online`` (Monte Carlo epsilon after every step)."""

from __future__ import annotations

import json
import math
import sys
import time

from jaxdp.cli._mechanism import mechanism_of
from jaxdp.cli._options import sampling_record
from jaxdp.cli._render import pyplot, with_progress


def verify(args):
    import jax
    import numpy as np

    import jaxdp

    mech = mechanism_of(args)
    # the estimator and its proven sample count, said before anything is sampled
    plan = jaxdp.evr_plan(mech, num_steps=args.steps, epsilon=args.epsilon, delta_est=args.delta_est, tau=args.tau)
    if not args.json:
        print(f"jaxdp verify: {plan}", file=sys.stderr, flush=True)
    verdict = with_progress(
        "verifying",
        lambda: jaxdp.evr(
            mech,
            num_steps=args.steps,
            epsilon=args.epsilon,
            delta_est=args.delta_est,
            tau=args.tau,
            key=jax.random.key(args.seed),
            max_samples=args.max_samples,
        ),
    )
    accepted = bool(verdict.accepted)
    record = {
        "accepted": accepted,
        "epsilon": args.epsilon,
        "delta": float(verdict.delta) if accepted else None,
        "delta_est": args.delta_est,
        "tau": args.tau,
        "delta_estimate": float(verdict.delta_estimate),
        "threshold": float(verdict.threshold),
        "samples": int(verdict.samples),
        "seconds": float(verdict.seconds),
        "estimators": list(verdict.estimators),
        "plan": {
            d: {"estimator": name, "samples": int(np.max(need)), "proven_counts": counts}
            for d, name, need, counts in zip(plan.directions, plan.estimators, plan.samples, plan.counts)
        },
        "seed": args.seed,
        "sigma": args.sigma,
        "q": args.q,
        "steps": args.steps,
        "adjacency": args.adjacency,
        **sampling_record(args),
    }
    if args.json:
        return json.dumps(record), record
    if accepted:
        verdict_text = (
            f"ACCEPTED: releasing is ({args.epsilon:g}, {record['delta']:.6g})-DP "
            f"(delta_est / tau; false-positive rate <= {record['delta']:.3g})"
        )
    else:
        verdict_text = "REJECTED: the estimate could not be verified; do not release at this (epsilon, delta)"
    text = (
        f"{verdict_text}\n"
        f"  Monte Carlo delta({args.epsilon:g}) = {record['delta_estimate']:.6g}, threshold {record['threshold']:.6g}\n"
        f"  {record['samples']} samples ({', '.join(record['estimators'])}), seed {args.seed}, "
        f"{record['seconds']:.2f} s"
    )
    return text, record


def online(args):
    import jax
    import numpy as np

    import jaxdp

    mech = mechanism_of(args)
    start = time.perf_counter()
    curve = with_progress(
        "online curve",
        lambda: jaxdp.online_epsilon(
            mech, delta=args.delta, max_steps=args.max_steps, key=jax.random.key(args.seed), num_samples=args.samples
        ),
    )
    seconds = time.perf_counter() - start
    cols = {k: np.asarray(getattr(curve, k), dtype=np.float64) for k in ("epsilon", "stderr", "ci_low", "ci_high")}
    steps = np.asarray(curve.steps)
    refused = np.asarray(curve.refused, dtype=bool)
    note = None
    if refused.any():
        first = int(steps[np.argmax(refused)])
        note = (
            f"{int(refused.sum())} of {len(steps)} steps refused (first: step {first}): the samples cannot vouch for "
            f"an estimate there (too few effective sample paths beyond epsilon); more --samples "
            "or a proven method (jaxdp epsilon) for those steps"
        )
    record = {
        "steps": steps.tolist(),
        **{k: [None if not math.isfinite(v) else v for v in cols[k].tolist()] for k in cols},
        "refused": refused.tolist(),
        "note": note,
        "delta": args.delta,
        "method": "montecarlo",
        "certified": False,
        "samples": args.samples,
        "seed": args.seed,
        "seconds": seconds,
        "sigma": args.sigma,
        "q": args.q,
        "adjacency": args.adjacency,
        **sampling_record(args),
    }
    if args.plot is not None:
        online_plot(args, steps, cols)
    if args.json:
        return json.dumps(record), record
    if args.csv:
        lines = ["step,epsilon,stderr,ci_low,ci_high"]
        lines += [
            f"{int(k)},{e:.8g},{s:.3g},{lo:.8g},{hi:.8g}"
            for k, e, s, lo, hi in zip(steps, cols["epsilon"], cols["stderr"], cols["ci_low"], cols["ci_high"])
        ]
        return "\n".join(lines), record
    last = len(steps) - 1
    marks = sorted({0, min(9, last), min(99, last), last // 2, last})
    body = "\n".join(
        f"  step {int(steps[i]):>7}: "
        + ("refused" if refused[i] else f"epsilon = {cols['epsilon'][i]:.5g} +- {cols['stderr'][i]:.2g}")
        for i in marks
    )
    text = (
        f"online epsilon at delta = {args.delta:g} (Monte Carlo estimate, {args.samples} sample paths, seed "
        f"{args.seed}; not a proven bound), {seconds:.2f} s\n{body}"
    )
    if note is not None:
        text += f"\nnote: {note}"
    if args.plot is not None:
        text += f"\nwrote the plot to {args.plot}"
    return text, record


def online_plot(args, steps, cols):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(steps, cols["epsilon"], color="C0", label="Monte Carlo estimate")
    ax.fill_between(steps, cols["ci_low"], cols["ci_high"], color="C0", alpha=0.25, label="95% interval")
    ax.set_xlabel("step")
    ax.set_ylabel(f"epsilon at delta = {args.delta:g}")
    sampled = f", q = {args.q:g}" if args.q != 1.0 else ""
    ax.set_title(f"Privacy spent during training (sigma = {args.sigma:g}{sampled})")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    plt.close(fig)
