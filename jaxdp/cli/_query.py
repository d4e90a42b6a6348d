"""``jaxdp epsilon`` and ``jaxdp delta``: one query, its companion bound, and Monte Carlo."""

from __future__ import annotations

import json
import math
import time

from jaxdp.cli._mechanism import mechanism_of, supports
from jaxdp.cli._options import FALLBACK_METHOD, sampling_record
from jaxdp.cli._render import with_progress

VACUOUS_NOTE = (
    "vacuous: no bound could be verified at these settings (the lattice window, the saddle-point "
    "bound and the Renyi-DP bound all failed their checks, e.g. a noise multiplier this small), so "
    "the proven answer is the trivial one; see docs/soundness.md"
)


def _configuration(args):
    """The record's description of what was accounted (both the accountants' and Monte Carlo's answers)."""
    record = {
        "mechanism": args.mechanism,
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
    if args.method is None:  # the library's default (certified where it supports the mechanism, else the fallback)
        args.method = jaxdp.default_method(mech)
    info = jaxdp.method_info(args.method)
    start = time.perf_counter()
    if args.command == "epsilon":
        eps = float(jaxdp.epsilon_for_delta(mech, delta=args.delta, num_steps=args.steps, method=args.method))
        delta = args.delta
    else:
        delta = float(jaxdp.delta_for_epsilon(mech, epsilon=args.epsilon, num_steps=args.steps, method=args.method))
        eps = args.epsilon
    seconds = time.perf_counter() - start
    # a certified method that cannot verify any bound answers with the trivial one (epsilon = inf, delta = 1)
    vacuous = bool(info.certified) and (eps == math.inf or (args.command == "delta" and delta >= 1.0))
    if not vacuous and (not math.isfinite(eps) or not math.isfinite(delta)):
        raise ValueError("the accountant returned a non-finite value; check the arguments.")
    upper = None
    companion = info.companion
    if companion is not None and not supports(companion, mech):
        companion = FALLBACK_METHOD
    if companion is not None:
        if args.command == "epsilon":
            upper = float(jaxdp.epsilon_for_delta(mech, delta=args.delta, num_steps=args.steps, method=companion))
        else:
            upper = float(jaxdp.delta_for_epsilon(mech, epsilon=args.epsilon, num_steps=args.steps, method=companion))
    record = {
        "epsilon": eps,
        "delta": delta,
        "method": info.name,
        "certified": bool(info.certified),
        "seconds": seconds,
        **_configuration(args),
    }
    if vacuous:
        record["epsilon"] = None if eps == math.inf else eps
        record["vacuous"] = True
        record["note"] = VACUOUS_NOTE
    if upper is not None:
        record["estimate"] = eps if args.command == "epsilon" else delta
        record["certified_upper"] = upper
        record["certified_upper_method"] = companion
    indicator = None
    if info.name in SADDLEPOINT_METHODS and math.isfinite(eps) and eps > 0:
        terms = jaxdp.saddlepoint_terms(mech, epsilon=eps, num_steps=args.steps)
        if info.name == "delta2":  # delta_2's distance to the split estimate, in epsilon
            gap = abs(float(terms.log_delta_plain) - float(terms.log_delta))
            indicator = gap / max(float(terms.saddle_point) * eps, 1e-300)
        else:
            indicator = float(terms.error_indicator)
        record["error_indicator"] = indicator
        if indicator > SADDLEPOINT_WARN:
            record["warning"] = _saddlepoint_warning(info.name, indicator)
    if args.json:
        return json.dumps(record), record
    kind = "proven upper bound" if info.certified else "estimate (not a proven bound)"
    sampled = f", q = {args.q:g}" if args.q != 1.0 else ""
    if args.sampling == "fixed":
        sampled = f", fixed batches of {args.batch_size} out of {args.dataset_size}"
    group = f", group of {args.group_size}" if args.group_size else ""
    text = (
        f"{args.mechanism} mechanism, sigma = {args.sigma:g}{sampled}{group}, {args.steps} steps, "
        f"{args.adjacency} adjacency\n"
        f"  epsilon = {eps:.6g}\n"
        f"  delta   = {delta:.6g}\n"
        f"  method  = {info.name} ({kind}), {seconds:.3f} s"
    )
    if upper is not None:
        what = "epsilon" if args.command == "epsilon" else "delta"
        text += f"\n  certified upper bound on {what} = {upper:.6g} ({companion})"
    if vacuous:
        text += f"\n  note: {VACUOUS_NOTE}"
    if indicator is not None and indicator > SADDLEPOINT_WARN:
        text += f"\n  warning: {_saddlepoint_warning(info.name, indicator)}"
    return text, record


#: the saddle-point error indicator above which the command line warns
SADDLEPOINT_WARN = 0.01


#: the saddle-point estimates whose error indicator the command line reports
SADDLEPOINT_METHODS = ("saddlepoint", "delta2")


def _saddlepoint_warning(name, indicator):
    better = "--method saddlepoint, " if name == "delta2" else ""
    return (
        f"the saddle-point estimate's error indicator is {indicator:.1%} of epsilon (over 1 %): prefer "
        f"{better}--method characteristic, or the certified bound, for this setting"
    )
