"""``jaxdp epsilon`` and ``jaxdp delta``: one query, its companion bound, and Monte Carlo."""

from __future__ import annotations

import json
import math
import time

from jaxdp.cli._mechanism import mechanism_of
from jaxdp.cli._options import sampling_record
from jaxdp.cli._render import with_progress


def _configuration(args):
    """The record's description of what was accounted (both the accountants' and Monte Carlo's answers)."""
    record = {
        # (fixed batches: the mechanism is the fixed-batch mixture, whatever --mechanism says)
        "mechanism": "fixed-batch" if args.sampling == "fixed" else args.mechanism,
        "sigma": args.sigma,
        "q": args.q,
        "steps": args.steps,
        "adjacency": args.adjacency,
        **sampling_record(args),
    }
    if args.group_size is not None:
        record["group_size"] = args.group_size
    return record


def _montecarlo(args, mech):
    import jax

    import jaxdp

    key = jax.random.key(args.seed)
    start = time.perf_counter()
    common = dict(num_steps=args.steps, key=key, num_samples=args.samples, estimator=args.estimator)
    if args.command == "epsilon":
        est = with_progress("sampling", lambda: jaxdp.montecarlo_epsilon(mech, delta=args.delta, **common))
        eps, delta = float(est.value), args.delta
    else:
        est = with_progress("sampling", lambda: jaxdp.montecarlo_delta(mech, epsilon=args.epsilon, **common))
        eps, delta = args.epsilon, float(est.value)
    seconds = time.perf_counter() - start
    record = {
        "epsilon": eps,
        "delta": delta,
        "method": "montecarlo",
        "certified": False,
        "estimator": args.estimator,
        "stderr": float(est.stderr),
        "ci_low": float(est.ci_low),
        "ci_high": float(est.ci_high),
        "confidence": est.confidence,
        "samples": args.samples,
        "seed": args.seed,
        "seconds": seconds,
        **_configuration(args),
    }
    if args.json:
        return json.dumps(record), record
    name = "epsilon" if args.command == "epsilon" else "delta"
    value = eps if args.command == "epsilon" else delta
    text = (
        f"{args.mechanism} mechanism, sigma = {args.sigma:g}, q = {args.q:g}, {args.steps} steps, "
        f"{args.adjacency} adjacency\n"
        f"  {name} = {value:.6g} +- {record['stderr']:.2g} (standard error), "
        f"{100 * est.confidence:g}% interval [{record['ci_low']:.6g}, {record['ci_high']:.6g}]\n"
        f"  method = montecarlo ({args.estimator} estimator, {args.samples} samples, seed {args.seed}; "
        f"an estimate, not a proven bound), {seconds:.3f} s"
    )
    return text, record


def methods(args):
    import jaxdp

    infos = [jaxdp.method_info(name) for name in jaxdp.available_methods()]
    if args.json:
        record = {
            "methods": [{"name": i.name, "certified": bool(i.certified), "description": i.description} for i in infos]
        }
        return json.dumps(record), record
    lines = [f"{i.name:<14} certified={str(i.certified).lower():<5} {i.description}" for i in infos]
    return "\n".join(lines), None


def query(args):
    """``jaxdp epsilon`` / ``jaxdp delta``."""
    import jaxdp

    mech = mechanism_of(args)
    if args.method == "montecarlo":
        return _montecarlo(args, mech)
    start = time.perf_counter()
    target = {"delta": args.delta} if args.command == "epsilon" else {"epsilon": args.epsilon}
    report = jaxdp.privacy_report(mech, num_steps=args.steps, method=args.method, **target)
    seconds = time.perf_counter() - start
    eps, delta, upper, companion = report.epsilon, report.delta, report.certified_upper, report.certified_upper_method
    record = {
        "epsilon": None if report.vacuous and eps == math.inf else eps,
        "delta": delta,
        "method": report.method,
        "certified": report.certified,
        "seconds": seconds,
        **_configuration(args),
    }
    if report.vacuous:
        record["vacuous"] = True
        record["note"] = report.note
    if upper is not None:
        record["estimate"] = eps if args.command == "epsilon" else delta
        record["certified_upper"] = upper
        record["certified_upper_method"] = companion
    if report.error_indicator is not None:
        record["error_indicator"] = report.error_indicator
    if report.warning is not None:
        record["warning"] = report.warning
    if args.json:
        return json.dumps(record), record
    kind = "proven upper bound" if report.certified else "estimate (not a proven bound)"
    sampled = f", q = {args.q:g}" if args.q != 1.0 else ""
    if args.sampling == "fixed":
        sampled = f", fixed batches of {args.batch_size} out of {args.dataset_size}"
    group = f", group of {args.group_size}" if args.group_size else ""
    text = (
        f"{args.mechanism} mechanism, sigma = {args.sigma:g}{sampled}{group}, {args.steps} steps, "
        f"{args.adjacency} adjacency\n"
        f"  epsilon = {eps:.6g}\n"
        f"  delta   = {delta:.6g}\n"
        f"  method  = {report.method} ({kind}), {seconds:.3f} s"
    )
    if upper is not None:
        what = "epsilon" if args.command == "epsilon" else "delta"
        text += f"\n  certified upper bound on {what} = {upper:.6g} ({companion})"
    if report.note is not None:
        text += f"\n  note: {report.note}"
    if report.warning is not None:
        text += f"\n  warning: {report.warning}"
    return text, record
