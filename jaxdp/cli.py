"""The ``jaxdp`` command line.

    jaxdp epsilon --sigma 1.0 --q 0.01 --steps 2000 --delta 1e-5 [--method M] [--json]
    jaxdp delta   --sigma 1.0 --q 0.01 --steps 2000 --epsilon 2.0 [--method M] [--json]
    jaxdp calibrate --target-epsilon 8 --delta 1e-5 --q 0.01 --steps 2000 [--method M] [--json]
    jaxdp calibrate --solve-for q|steps --sigma 0.8 ... (the other two given)
    jaxdp sweep --target-epsilon 8 --delta 1e-5 --q 0.001,0.01,0.1 --steps 100,1000,10000 [--out F.csv] [--plot F.png]
    jaxdp epsilon ... --method montecarlo [--samples N] [--seed S] [--estimator tilted|tilted-one|tilted-exact|simple]
    jaxdp verify --sigma 1.0 --q 0.01 --steps 100 --epsilon 2.0 --delta-est 1e-4 [--tau 0.9] [--seed S] [--json]
    jaxdp online --sigma 1.0 --q 0.01 --steps 2000 --delta 1e-5 [--samples N] [--json | --csv] [--plot F.png]
    jaxdp group-curve --sigma 2 --q 0.01 --steps 2000 --delta 1e-6 --group-size 16 [--json | --csv] [--plot F.png]
    jaxdp curve --sigma 1 --q 0.01 --steps 2000 --delta 1e-5 [--json | --csv] [--plot F.png]

Every subcommand takes ``--sampling poisson|fixed --dataset-size N --batch-size B`` (fixed: batches of exactly
B out of N, :meth:`jaxdp.MixtureOfGaussians.fixed_batch_group`; poisson with N and B: q = B / N).

Bad input exits with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
import types

MECHANISMS = ("poisson-gaussian", "gaussian", "laplace")
ADJACENCIES = ("add_or_remove", "remove", "add")
DEFAULT_METHOD = "certified"
VACUOUS_NOTE = (
    "vacuous: no bound could be verified at these settings (the lattice window, the saddle-point "
    "bound and the Renyi-DP bound all failed their checks, e.g. a noise multiplier this small), so "
    "the proven answer is the trivial one; see docs/soundness.md"
)
#: the default for mechanisms the certified accountant does not cover
FALLBACK_METHOD = "saddlepoint-certified"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message):  # one line, exit status 2
        # ("argument --sigma: --sigma must be > 0": a type's own message names its option already)
        head, _, rest = message.partition(": ")
        if head.startswith("argument ") and rest.startswith(head.removeprefix("argument ").split("/")[0] + " "):
            message = rest
        raise _UsageError(message)


class _Help(argparse.HelpFormatter):
    """Help that shows each option's default (where it has one worth showing)."""

    def _get_help_string(self, action):
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in text
        return f"{text} (default: %(default)s)" if shown and action.option_strings else text


def _float(name, within=None):
    """argparse type: a number, in the range ``within`` names where given (``_RANGES``), with the library's own
    message (``jaxdp.numerics.validate``): bad input is refused while parsing, before JAX is imported."""

    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if within is not None:
            if not math.isfinite(value):
                raise argparse.ArgumentTypeError(f"{name} must be finite (not NaN or inf), got {value!r}.")
            test, words = _RANGES[within]
            if not test(value):
                raise argparse.ArgumentTypeError(f"{name} must be {words}, got {value!r}.")
        return value

    return parse


#: the ranges of the command line's numbers (as ``jaxdp.numerics.validate`` words them)
_RANGES = {
    "positive": (lambda v: v > 0, "> 0"),
    "nonnegative": (lambda v: v >= 0, ">= 0"),
    "probability": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "open_unit": (lambda v: 0 < v < 1, "in (0, 1)"),
}


def _int(name):
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer >= 1, got {text!r}") from None
        if not math.isfinite(value) or value != int(value) or value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be an integer >= 1, got {text!r}")
        return int(value)

    return parse


_steps = _int("--steps")


def _add_sampling(p, *, batch_sizes=False):
    p.add_argument(
        "--sampling",
        choices=("poisson", "fixed"),
        default="poisson",
        help="poisson (each record with probability q) or fixed (a batch of exactly --batch-size records out of "
        "--dataset-size, without replacement; Ganesh 2024, Thm 3.3)",
    )
    p.add_argument("--dataset-size", type=_int("--dataset-size"), default=None, help="records in the dataset (N)")
    if batch_sizes:
        p.add_argument("--batch-size", type=_floats("--batch-size"), default=None, help="comma-separated batch sizes")
    else:
        p.add_argument("--batch-size", type=_int("--batch-size"), default=None, help="records per batch (B); q = B / N")


def _resolve_sampling(args, *, q_default=1.0):
    """Checks the sampling options and sets ``args.q`` (``B / N`` where a batch size is given)."""
    if not hasattr(args, "sampling"):
        return
    n, b = args.dataset_size, args.batch_size
    if args.sampling == "fixed":
        if n is None or b is None:
            raise ValueError("--sampling fixed needs --dataset-size and --batch-size.")
        if args.q is not None:
            raise ValueError("--sampling fixed takes --dataset-size and --batch-size, not --q.")
        for value in b if isinstance(b, list) else [b]:
            if value != int(value) or value < 1 or value > n:
                raise ValueError(f"--batch-size must be an integer in [1, --dataset-size = {n}], got {value:g}.")
        args.q = [v / n for v in b] if isinstance(b, list) else b / n
        return
    if (n is None) != (b is None):
        raise ValueError("--dataset-size and --batch-size go together (Poisson sampling at q = B / N).")
    if n is not None:
        if args.q is not None:
            raise ValueError("give --q, or --dataset-size with --batch-size (q = B / N), not both.")
        for value in b if isinstance(b, list) else [b]:
            if value > n:
                raise ValueError(f"--batch-size must be at most --dataset-size = {n}, got {value:g}.")
        args.q = [v / n for v in b] if isinstance(b, list) else b / n
    elif args.q is None:
        args.q = q_default


def _sampling_record(args):
    if getattr(args, "sampling", "poisson") == "poisson" and getattr(args, "dataset_size", None) is None:
        return {}
    return {"sampling": args.sampling, "dataset_size": args.dataset_size, "batch_size": args.batch_size}


def _add_common(p):
    p.add_argument("--sigma", type=_float("--sigma", "positive"), required=True, help="noise multiplier (> 0)")
    p.add_argument(
        "--q",
        type=_float("--q", "probability"),
        default=None,
        help="sampling probability in (0, 1]; 1 = no subsampling",
    )
    p.add_argument("--steps", type=_steps, required=True, help="number of steps (integer >= 1)")
    p.add_argument("--mechanism", choices=MECHANISMS, default="poisson-gaussian", help="the mechanism of each step")
    p.add_argument("--group-size", type=_int("--group-size"), default=None, help="group privacy for k records")
    p.add_argument("--adjacency", choices=ADJACENCIES, default="add_or_remove", help="neighbouring datasets")
    _add_sampling(p)
    p.add_argument(
        "--method",
        default=None,
        help=f"accountant (see `jaxdp methods`); default {DEFAULT_METHOD!r} ({FALLBACK_METHOD!r} for laplace)",
    )
    p.add_argument("--samples", type=int, default=1_000_000, help="Monte Carlo samples (--method montecarlo)")
    p.add_argument("--seed", type=int, default=0, help="Monte Carlo seed (--method montecarlo)")
    p.add_argument(
        "--estimator",
        choices=("tilted", "tilted-one", "tilted-exact", "simple"),
        default="tilted",
        help="Monte Carlo estimator (--method montecarlo)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _add_last_step(p):
    """``--steps`` of the subcommands that run to a last step (``--max-steps``: its earlier name, kept)."""
    p.add_argument(
        "--steps",
        "--max-steps",
        dest="max_steps",
        metavar="STEPS",
        type=_steps,
        required=True,
        help="the last step (integer >= 1; --max-steps: its earlier name)",
    )


def build_parser():
    from jaxdp import __version__

    parser = _Parser(prog="jaxdp", description="Differential-privacy accounting for DP-SGD and friends.")
    parser.add_argument("--version", action="version", version=f"jaxdp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    pe = sub.add_parser("epsilon", help="epsilon for a target delta")
    _add_common(pe)
    pe.add_argument("--delta", type=_float("--delta", "open_unit"), required=True, help="target delta in (0, 1)")
    pd = sub.add_parser("delta", help="delta for a target epsilon")
    _add_common(pd)
    pd.add_argument("--epsilon", type=_float("--epsilon", "nonnegative"), required=True, help="target epsilon (>= 0)")
    pc = sub.add_parser("calibrate", help="noise multiplier (or q, or steps) for a privacy budget")
    pc.add_argument(
        "--target-epsilon", type=_float("--target-epsilon", "positive"), required=True, help="the budget (> 0)"
    )
    pc.add_argument("--delta", type=_float("--delta", "open_unit"), required=True, help="delta in (0, 1)")
    pc.add_argument("--solve-for", choices=("sigma", "q", "steps"), default="sigma")
    pc.add_argument(
        "--sigma", type=_float("--sigma", "positive"), default=None, help="noise multiplier (when solving for q/steps)"
    )
    pc.add_argument("--q", type=_float("--q", "probability"), default=None, help="sampling probability in (0, 1]")
    pc.add_argument("--steps", type=_steps, default=None, help="number of steps (integer >= 1)")
    pc.add_argument(
        "--group-size", type=_int("--group-size"), default=None, help="group privacy for k records (solving for sigma)"
    )
    _add_sampling(pc)
    pc.add_argument("--sigma-max", type=_float("--sigma-max", "positive"), default=100.0, help="largest sigma searched")
    pc.add_argument("--max-steps", type=_steps, default=10**7, help="largest number of steps searched")
    pc.add_argument("--method", default="characteristic", help="estimate that drives the search")
    pc.add_argument(
        "--certify", default="certified-fast", help="certified accountant of the final check ('none' to skip it)"
    )
    pc.add_argument("--json", action="store_true", help="print one JSON object")
    ps = sub.add_parser("sweep", help="calibrate sigma on a grid of (q, steps); CSV and an optional heatmap")
    ps.add_argument(
        "--target-epsilon", type=_float("--target-epsilon", "positive"), required=True, help="the budget (> 0)"
    )
    ps.add_argument("--delta", type=_float("--delta", "open_unit"), required=True, help="delta in (0, 1)")
    ps.add_argument("--q", type=_floats("--q"), default=None, help="comma-separated sampling probabilities")
    _add_sampling(ps, batch_sizes=True)
    ps.add_argument("--steps", type=_floats("--steps"), required=True, help="comma-separated numbers of steps")
    ps.add_argument("--method", default="saddlepoint", help="estimate that drives the search")
    ps.add_argument("--certify", default="certified-fast", help="certified accountant of the check ('none' to skip)")
    ps.add_argument("--out", default=None, help="CSV file (default: standard output)")
    ps.add_argument("--plot", default=None, help="heatmap of sigma over the grid (PNG, needs matplotlib)")
    ps.add_argument("--json", action="store_true", help="print one JSON object (the CSV still goes to --out)")
    pv = sub.add_parser("verify", help="estimate-verify-release: Monte Carlo check of an estimated (epsilon, delta)")
    pv.add_argument("--sigma", type=_float("--sigma", "positive"), required=True, help="noise multiplier (> 0)")
    pv.add_argument("--q", type=_float("--q", "probability"), default=None, help="sampling probability in (0, 1]")
    _add_sampling(pv)
    pv.add_argument("--steps", type=_steps, required=True, help="number of steps (integer >= 1)")
    pv.add_argument("--adjacency", choices=ADJACENCIES, default="add_or_remove", help="neighbouring datasets")
    pv.add_argument(
        "--epsilon", type=_float("--epsilon", "nonnegative"), required=True, help="the candidate epsilon (>= 0)"
    )
    pv.add_argument("--delta-est", type=_float("--delta-est", "open_unit"), required=True, help="the estimated delta")
    pv.add_argument("--tau", type=_float("--tau", "open_unit"), default=0.9, help="tolerated underestimate in (0, 1)")
    pv.add_argument("--seed", type=int, default=0, help="seed of the verifier's samples")
    pv.add_argument("--max-samples", type=int, default=10**8, help="most samples per direction")
    pv.add_argument("--json", action="store_true", help="print one JSON object")
    po = sub.add_parser("online", help="Monte Carlo epsilon after every step, from one sample set")
    po.add_argument("--sigma", type=_float("--sigma", "positive"), required=True, help="noise multiplier (> 0)")
    po.add_argument("--q", type=_float("--q", "probability"), default=None, help="sampling probability in (0, 1]")
    _add_sampling(po)
    _add_last_step(po)
    po.add_argument("--delta", type=_float("--delta", "open_unit"), required=True, help="delta in (0, 1)")
    po.add_argument("--adjacency", choices=ADJACENCIES, default="add_or_remove", help="neighbouring datasets")
    po.add_argument("--samples", type=int, default=100_000, help="sample paths")
    po.add_argument("--seed", type=int, default=0, help="seed")
    fmt = po.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print one JSON object (arrays per step)")
    fmt.add_argument("--csv", action="store_true", help="print CSV: step, epsilon, stderr, ci_low, ci_high")
    po.add_argument("--plot", default=None, help="plot of epsilon against steps (PNG, needs matplotlib)")
    pg = sub.add_parser("group-curve", help="epsilon against the group size, beside the black-box conversion")
    pg.add_argument("--sigma", type=_float("--sigma", "positive"), required=True, help="noise multiplier (> 0)")
    pg.add_argument("--q", type=_float("--q", "probability"), default=None, help="sampling probability in (0, 1]")
    pg.add_argument("--steps", type=_steps, required=True, help="number of steps (integer >= 1)")
    pg.add_argument("--delta", type=_float("--delta", "open_unit"), required=True, help="delta in (0, 1)")
    pg.add_argument(
        "--group-size",
        "--max-group",
        metavar="GROUP_SIZE",
        dest="max_group",
        type=_int("--group-size"),
        required=True,
        help="the largest group size G (--max-group: its earlier name)",
    )
    pg.add_argument("--adjacency", choices=ADJACENCIES, default="add_or_remove", help="neighbouring datasets")
    pg.add_argument("--method", default=None, help=f"accountant (default {DEFAULT_METHOD!r})")
    _add_sampling(pg)
    _add_outputs(pg)
    pk = sub.add_parser("curve", help="epsilon against the number of steps: estimate and certified bound")
    pk.add_argument("--sigma", type=_float("--sigma", "positive"), required=True, help="noise multiplier (> 0)")
    pk.add_argument("--q", type=_float("--q", "probability"), default=None, help="sampling probability in (0, 1]")
    _add_last_step(pk)
    pk.add_argument("--delta", type=_float("--delta", "open_unit"), required=True, help="delta in (0, 1)")
    pk.add_argument("--points", type=_int("--points"), default=40, help="numbers of steps evaluated (log-spaced)")
    pk.add_argument("--group-size", type=_int("--group-size"), default=None, help="group privacy for k records")
    pk.add_argument("--adjacency", choices=ADJACENCIES, default="add_or_remove", help="neighbouring datasets")
    pk.add_argument("--method", default="characteristic", help="the estimate")
    pk.add_argument("--certify", default="certified", help="the certified bound ('none' to skip it)")
    _add_sampling(pk)
    _add_outputs(pk)
    pm = sub.add_parser("methods", help="list the accountants")
    pm.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _add_outputs(p):
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print one JSON object")
    fmt.add_argument("--csv", action="store_true", help="print CSV")
    p.add_argument("--plot", default=None, help="write a plot (PNG, needs matplotlib: pip install 'jaxdp[plot]')")


def _with_progress(label, fn):
    """``fn()`` with an elapsed-time indicator on stderr (a TTY only) once it runs over two seconds."""
    import threading

    if not sys.stderr.isatty():
        return fn()
    done = threading.Event()

    def spin():
        if done.wait(2.0):
            return
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        start = time.perf_counter()
        bar = tqdm(total=None, desc=label, unit="s", file=sys.stderr, leave=False) if tqdm else None
        while not done.wait(0.5):
            if bar is not None:
                bar.set_postfix_str(f"{time.perf_counter() - start:.0f} s")
                bar.update(0)
            else:
                print(f"\r{label}: {time.perf_counter() - start:.0f} s", end="", file=sys.stderr, flush=True)
        if bar is not None:
            bar.close()
        else:
            print("", file=sys.stderr)

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        return fn()
    finally:
        done.set()
        thread.join()


def _verify(args):
    import jax
    import numpy as np

    import jaxdp
    from jaxdp.numerics import validate

    validate.positive("--sigma", args.sigma)
    validate.nonnegative("--epsilon", args.epsilon)
    validate.probability("--q", args.q)
    mech = _sampled_mechanism(args)
    # the estimator and its proven sample count, said before anything is sampled
    plan = jaxdp.evr_plan(mech, num_steps=args.steps, epsilon=args.epsilon, delta_est=args.delta_est, tau=args.tau)
    if not args.json:
        print(f"jaxdp verify: {plan}", file=sys.stderr, flush=True)
    verdict = _with_progress(
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
        **_sampling_record(args),
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


def _online(args):
    import jax
    import numpy as np

    import jaxdp
    from jaxdp.numerics import validate

    validate.positive("--sigma", args.sigma)
    validate.open_unit("--delta", args.delta)
    if args.samples < 1:
        raise ValueError(f"--samples must be an integer >= 1, got {args.samples}.")
    validate.probability("--q", args.q)
    mech = _sampled_mechanism(args)
    start = time.perf_counter()
    curve = _with_progress(
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
        **_sampling_record(args),
    }
    if args.plot is not None:
        _online_plot(args, steps, cols)
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


def _online_plot(args, steps, cols):
    plt = _pyplot()
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


def _floats(name):
    def parse(text):
        try:
            return [float(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be comma-separated numbers, got {text!r}") from None

    return parse


def _fixed_batch_of(sigma, *, n, b):
    import jaxdp

    return jaxdp.MixtureOfGaussians.fixed_batch_group(sigma, dataset_size=n, batch_size=b)


def _sweep(args):
    import csv
    import functools
    import io

    import numpy as np

    import jaxdp

    certify = None if args.certify.lower() == "none" else args.certify
    if args.q is None:
        raise ValueError("sweep needs --q, or --dataset-size with --batch-size.")
    q = np.asarray(args.q, dtype=np.float64)
    steps = np.asarray(args.steps, dtype=np.float64)
    start = time.perf_counter()
    if args.sampling == "fixed":  # one mixture per batch size: a calibration per cell
        cells = []
        for n_steps in steps:
            for b in args.batch_size:
                family = functools.partial(_fixed_batch_of, n=args.dataset_size, b=int(b))
                cells.append(
                    jaxdp.calibrate_noise_multiplier(
                        target_epsilon=args.target_epsilon,
                        delta=args.delta,
                        num_steps=int(n_steps),
                        mechanism=family,
                        method=args.method,
                        certify=certify,
                    )
                )
        shape = (steps.size, q.size)

        r = types.SimpleNamespace(
            noise_multiplier=np.reshape([float(c.noise_multiplier) for c in cells], shape),
            epsilon_estimate=np.reshape([float(c.epsilon_estimate) for c in cells], shape),
            epsilon_certified=np.reshape([float(c.epsilon_certified) for c in cells], shape),
            message=[c.message for c in cells],
        )
    else:
        r = jaxdp.calibrate_noise_multiplier(
            target_epsilon=args.target_epsilon,
            delta=args.delta,
            sampling_prob=q[None, :],
            num_steps=steps[:, None],
            method=args.method,
            certify=certify,
        )
    sigma = np.asarray(r.noise_multiplier)
    seconds = time.perf_counter() - start
    messages = r.message
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["q", "steps", "sigma", "epsilon_estimate", "epsilon_certified", "status"])
    eps_e, eps_c = np.asarray(r.epsilon_estimate), np.asarray(r.epsilon_certified)
    for i in range(steps.size):
        for j in range(q.size):
            k = i * q.size + j
            writer.writerow(
                [
                    f"{q[j]:g}",
                    f"{steps[i]:g}",
                    f"{sigma[i, j]:.8g}",
                    f"{eps_e[i, j]:.8g}",
                    f"{eps_c[i, j]:.8g}",
                    messages[k],
                ]
            )
    text = buf.getvalue()
    if args.out is not None:
        with open(args.out, "w") as fh:
            fh.write(text)
        text = f"wrote {q.size * steps.size} calibrations to {args.out} in {seconds:.2f} s"
    if args.plot is not None:
        _heatmap(args, q, steps, sigma)
        text += f"\nwrote the heatmap to {args.plot}"
    if args.json:
        cells = [
            {
                "q": float(q[j]),
                "steps": int(steps[i]),
                "sigma": _finite_or_none([sigma[i, j]])[0],
                "epsilon_estimate": _finite_or_none([eps_e[i, j]])[0],
                "epsilon_certified": _finite_or_none([eps_c[i, j]])[0],
                "status": messages[i * q.size + j],
            }
            for i in range(steps.size)
            for j in range(q.size)
        ]
        record = {
            "target_epsilon": args.target_epsilon,
            "delta": args.delta,
            "method": args.method,
            "certify": certify,
            "seconds": seconds,
            **_sampling_record(args),
            "cells": cells,
        }
        return json.dumps(record), record
    return text.rstrip("\n"), None


def _heatmap(args, q, steps, sigma):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * q.size, 1.0 + 0.6 * steps.size))
    im = ax.imshow(sigma, origin="lower", aspect="auto", cmap="viridis")
    ax.set_xticks(range(q.size), [f"{v:g}" for v in q])
    ax.set_yticks(range(steps.size), [f"{v:g}" for v in steps])
    ax.set_xlabel("sampling probability q")
    ax.set_ylabel("steps")
    for i in range(steps.size):
        for j in range(q.size):
            ax.text(j, i, f"{sigma[i, j]:.3g}", ha="center", va="center", color="w", fontsize=8)
    ax.set_title(f"noise multiplier for eps <= {args.target_epsilon:g}, delta = {args.delta:g}")
    fig.colorbar(im, ax=ax, label="sigma")
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    plt.close(fig)


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("--plot needs matplotlib (pip install 'jaxdp[plot]').") from None
    return plt


def _finite_or_none(values):
    return [float(v) if math.isfinite(float(v)) else None for v in values]


def _describe_sampling(args):
    if args.sampling == "fixed":
        return f"fixed batches of {args.batch_size} out of {args.dataset_size}"
    return f"Poisson sampling, q = {args.q:g}" if args.q != 1.0 else "no subsampling"


def _group_curve(args):
    import numpy as np

    import jaxdp
    from jaxdp.numerics import validate

    validate.positive("--sigma", args.sigma)
    validate.open_unit("--delta", args.delta)
    validate.probability("--q", args.q)
    common = dict(
        noise_multiplier=args.sigma,
        num_steps=args.steps,
        delta=args.delta,
        max_group_size=args.max_group,
        method=args.method,
        adjacency=args.adjacency,
    )
    start = time.perf_counter()
    if args.sampling == "fixed":
        curve = _with_progress(
            "group curve",
            lambda: jaxdp.group_curve(
                sampling="fixed", dataset_size=args.dataset_size, batch_size=args.batch_size, **common
            ),
        )
    else:
        curve = _with_progress("group curve", lambda: jaxdp.group_curve(sampling_prob=args.q, **common))
    # beside a fixed batch: what a Poisson-only accountant would report at q = B / N
    poisson = None
    if args.sampling == "fixed":
        poisson = jaxdp.group_curve(sampling_prob=args.q, **{**common, "method": curve.method})
    seconds = time.perf_counter() - start
    g = np.asarray(curve.group_sizes)
    eps = np.asarray(curve.epsilon, dtype=np.float64)
    black = np.asarray(curve.black_box_epsilon, dtype=np.float64)
    linear = g * eps[0]
    record = {
        "group_size": g.tolist(),
        "epsilon": _finite_or_none(eps),
        "black_box_epsilon": _finite_or_none(black),
        "linear_epsilon": _finite_or_none(linear),
        "delta": args.delta,
        "method": curve.method,
        "certified": bool(jaxdp.method_info(curve.method).certified),
        "sigma": args.sigma,
        "q": args.q,
        "steps": args.steps,
        "adjacency": args.adjacency,
        "seconds": seconds,
        **_sampling_record(args),
    }
    if poisson is not None:
        record["poisson_epsilon"] = _finite_or_none(np.asarray(poisson.epsilon, dtype=np.float64))
    if args.plot is not None:
        _group_plot(args, record)
    if args.json:
        return json.dumps(record), record
    cols = ["group_size", "epsilon", "black_box_epsilon", "linear_epsilon"]
    if poisson is not None:
        cols.insert(2, "poisson_epsilon")
    if args.csv:
        lines = [",".join(cols)]
        lines += [",".join("" if record[c][i] is None else f"{record[c][i]:.8g}" for c in cols) for i in range(len(g))]
        return "\n".join(lines), record
    head = f"  {'g':>3}  {'epsilon':>10}" + (f"  {'as Poisson':>10}" if poisson is not None else "")
    head += f"  {'black box':>10}  {'g * eps_1':>10}"
    rows = []
    for i in range(len(g)):
        vals = [record["epsilon"][i]] + ([record["poisson_epsilon"][i]] if poisson is not None else [])
        vals += [record["black_box_epsilon"][i], record["linear_epsilon"][i]]
        rows.append(f"  {g[i]:>3}" + "".join("  " + (f"{v:>10.5g}" if v is not None else f"{'inf':>10}") for v in vals))
    kind = "proven upper bounds" if record["certified"] else "estimates"
    text = (
        f"group privacy at delta = {args.delta:g}: sigma = {args.sigma:g}, {_describe_sampling(args)}, "
        f"{args.steps} steps ({curve.method}, {kind}; {seconds:.2f} s)\n" + head + "\n" + "\n".join(rows)
    )
    if args.plot is not None:
        text += f"\nwrote the plot to {args.plot}"
    return text, record


def _group_plot(args, record):
    plt = _pyplot()
    g = record["group_size"]

    def arr(name):
        return [math.nan if v is None else v for v in record[name]]

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    label = "jaxdp: fixed batch (Thm 3.3)" if args.sampling == "fixed" else "jaxdp: mixture of Gaussians (Thm 3.1)"
    ax.plot(g, arr("epsilon"), "o-", color="C0", label=label)
    if "poisson_epsilon" in record:
        ax.plot(g, arr("poisson_epsilon"), "s--", color="C2", label=f"same, accounted as Poisson (q = {args.q:g})")
    ax.plot(g, arr("black_box_epsilon"), "^-", color="C3", label="black-box conversion (g eps, g e^((g-1) eps) delta)")
    ax.plot(g, arr("linear_epsilon"), ":", color="0.4", label="linear: g x example-level epsilon")
    gone = [k for k, v in zip(g, record["black_box_epsilon"]) if v is None]
    if gone:
        ax.text(
            0.98,
            0.03,
            f"black-box conversion: no finite epsilon for g >= {gone[0]}",
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            color="C3",
            fontsize=8,
        )
    ax.set_xlabel("group size g (records)")
    ax.set_ylabel(f"epsilon at delta = {args.delta:g}")
    ax.set_title(f"Group privacy: sigma = {args.sigma:g}, {_describe_sampling(args)}, {args.steps} steps", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    plt.close(fig)


def _curve(args):
    import numpy as np

    import jaxdp
    from jaxdp.numerics import validate

    validate.positive("--sigma", args.sigma)
    validate.open_unit("--delta", args.delta)
    mech = _mechanism(args)
    certify = None if args.certify.lower() == "none" else args.certify
    steps = np.unique(np.round(np.geomspace(1, args.max_steps, min(args.points, args.max_steps))).astype(int))
    start = time.perf_counter()

    def run():
        est = [
            float(jaxdp.epsilon_for_delta(mech, delta=args.delta, num_steps=int(n), method=args.method)) for n in steps
        ]
        cert = None
        if certify is not None:
            cert = [
                float(jaxdp.epsilon_for_delta(mech, delta=args.delta, num_steps=int(n), method=certify)) for n in steps
            ]
        return est, cert

    est, cert = _with_progress("curve", run)
    seconds = time.perf_counter() - start
    record = {
        "steps": steps.tolist(),
        "epsilon": _finite_or_none(est),
        "method": args.method,
        "certified": bool(jaxdp.method_info(args.method).certified),
        "delta": args.delta,
        "sigma": args.sigma,
        "q": args.q,
        "adjacency": args.adjacency,
        "seconds": seconds,
        **_sampling_record(args),
    }
    if cert is not None:
        record["epsilon_certified"] = _finite_or_none(cert)
        record["certify"] = certify
    if args.group_size is not None:
        record["group_size"] = args.group_size
    if args.plot is not None:
        _curve_plot(args, record)
    if args.json:
        return json.dumps(record), record
    cols = ["steps", "epsilon"] + (["epsilon_certified"] if cert is not None else [])
    if args.csv:
        lines = [",".join(cols)]
        lines += [
            ",".join("" if record[c][i] is None else f"{record[c][i]:.8g}" for c in cols) for i in range(len(steps))
        ]
        return "\n".join(lines), record
    body = "\n".join(
        f"  {n:>8} steps: epsilon = {e:.5g}" + (f"  (certified <= {c:.5g})" if cert is not None else "")
        for n, e, c in zip(steps, est, cert if cert is not None else est)
    )
    text = (
        f"epsilon at delta = {args.delta:g}: sigma = {args.sigma:g}, {_describe_sampling(args)} "
        f"({args.method} estimate" + (f", {certify} bound" if cert is not None else "") + f"; {seconds:.2f} s)\n" + body
    )
    if args.plot is not None:
        text += f"\nwrote the plot to {args.plot}"
    return text, record


def _curve_plot(args, record):
    plt = _pyplot()

    def arr(name):
        return [math.nan if v is None else v for v in record[name]]

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(record["steps"], arr("epsilon"), "-", color="C0", lw=2, label=f"estimate ({args.method})")
    if "epsilon_certified" in record:
        ax.plot(
            record["steps"],
            arr("epsilon_certified"),
            "--",
            color="C3",
            label=f"proven upper bound ({record['certify']})",
        )
    ax.set_xscale("log")
    ax.set_xlabel("steps (log scale)")
    ax.set_ylabel(f"epsilon at delta = {args.delta:g}")
    group = f", group of {args.group_size}" if args.group_size else ""
    ax.set_title(
        f"Privacy against training length: sigma = {args.sigma:g}, {_describe_sampling(args)}{group}", fontsize=10
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    plt.close(fig)


def _need(args, *names):
    for name in names:
        if getattr(args, name) is None:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"--solve-for {args.solve_for} needs {flag}.")


def _calibrate(args):
    import functools

    import jaxdp
    from jaxdp.numerics import validate

    certify = None if args.certify.lower() == "none" else args.certify
    common = {"target_epsilon": args.target_epsilon, "delta": args.delta, "method": args.method, "certify": certify}
    start = time.perf_counter()
    if args.sampling == "fixed" and args.solve_for != "sigma":
        raise ValueError("--sampling fixed calibrates the noise multiplier only (--solve-for sigma).")
    if args.solve_for == "sigma" and args.sampling == "fixed":
        _need(args, "steps")
        family = functools.partial(_fixed_batch, args=args, group_size=args.group_size)
        r = jaxdp.calibrate_noise_multiplier(num_steps=args.steps, mechanism=family, sigma_max=args.sigma_max, **common)
    elif args.solve_for == "sigma":
        _need(args, "q", "steps")
        if args.group_size is not None and args.group_size != 1:
            validate.probability("--q", args.q)
            family = functools.partial(_group_family, q=args.q, k=args.group_size)
            r = jaxdp.calibrate_noise_multiplier(
                num_steps=args.steps, mechanism=family, sigma_max=args.sigma_max, **common
            )
        else:
            r = jaxdp.calibrate_noise_multiplier(
                sampling_prob=args.q, num_steps=args.steps, sigma_max=args.sigma_max, **common
            )
    elif args.solve_for == "q":
        _need(args, "sigma", "steps")
        r = jaxdp.calibrate_sampling_prob(noise_multiplier=args.sigma, num_steps=args.steps, **common)
    else:
        _need(args, "sigma", "q")
        r = jaxdp.calibrate_num_steps(
            noise_multiplier=args.sigma, sampling_prob=args.q, max_steps=args.max_steps, **common
        )
    seconds = time.perf_counter() - start
    steps = float(r.num_steps)
    record = {
        "solve_for": args.solve_for,
        "sigma": float(r.noise_multiplier),
        "q": float(r.sampling_prob) if args.solve_for == "q" else args.q,
        "steps": int(steps) if math.isfinite(steps) else None,
        "target_epsilon": args.target_epsilon,
        "delta": args.delta,
        "epsilon_estimate": float(r.epsilon_estimate),
        "epsilon_certified": None if certify is None else float(r.epsilon_certified),
        "method": r.method,
        "certify": r.certify,
        "status": r.message,
        "iterations": int(r.iterations),
        "seconds": seconds,
    }
    if args.group_size is not None:
        record["group_size"] = args.group_size
    record.update(_sampling_record(args))
    if args.json:
        return json.dumps(record), record
    cert = "not checked" if certify is None else f"{record['epsilon_certified']:.6g} ({r.certify}, proven)"
    text = (
        f"calibrated {args.solve_for} for epsilon <= {args.target_epsilon:g} at delta = {args.delta:g}\n"
        f"  sigma             = {record['sigma']:.6g}\n"
        f"  q                 = {record['q']:.6g}\n"
        f"  steps             = {record['steps']}\n"
        f"  epsilon_estimate  = {record['epsilon_estimate']:.6g} ({r.method})\n"
        f"  epsilon_certified = {cert}\n"
        f"  status            = {r.message}\n"
        f"  seconds           = {seconds:.3f}"
    )
    return text, record


def _group_family(sigma, *, q, k):
    import jaxdp

    return jaxdp.MixtureOfGaussians.poisson_group(sigma, q, k)


def _fixed_batch(sigma, args, group_size=None):
    import jaxdp

    return jaxdp.MixtureOfGaussians.fixed_batch_group(
        sigma,
        dataset_size=args.dataset_size,
        batch_size=args.batch_size,
        group_size=group_size or 1,
        adjacency=getattr(args, "adjacency", "add_or_remove"),
    )


def _sampled_mechanism(args):
    """The mechanism of the verify / online subcommands (no --mechanism or --group-size there)."""
    import jaxdp

    if args.sampling == "fixed":
        return _fixed_batch(args.sigma, args)
    if args.q == 1.0:
        return jaxdp.Gaussian(args.sigma, adjacency=args.adjacency)
    return jaxdp.PoissonSubsampledGaussian(args.sigma, args.q, adjacency=args.adjacency)


def _mechanism(args):
    import jaxdp
    from jaxdp.numerics import validate

    if args.group_size is not None and args.group_size < 1:
        raise ValueError(f"--group-size must be an integer >= 1, got {args.group_size}.")
    mechanism = getattr(args, "mechanism", "poisson-gaussian")  # (the curve subcommand has no --mechanism)
    if args.sampling == "fixed":
        if mechanism != "poisson-gaussian":
            raise ValueError("--sampling fixed is a subsampled Gaussian: leave --mechanism at poisson-gaussian.")
        return _fixed_batch(args.sigma, args, args.group_size)
    if mechanism == "laplace":
        if args.q != 1.0 or args.group_size:
            raise ValueError("--mechanism laplace takes no --q or --group-size.")
        return jaxdp.Laplace(args.sigma, adjacency=args.adjacency)
    if mechanism == "gaussian" and args.q != 1.0:
        raise ValueError("--mechanism gaussian means no subsampling; use --q 1 or --mechanism poisson-gaussian.")
    validate.probability("--q", args.q)
    if args.group_size is not None and (args.group_size > 1 or args.q < 1.0):
        return jaxdp.MixtureOfGaussians.poisson_group(args.sigma, args.q, args.group_size, adjacency=args.adjacency)
    if args.q == 1.0:
        return jaxdp.Gaussian(args.sigma, adjacency=args.adjacency)
    return jaxdp.PoissonSubsampledGaussian(args.sigma, args.q, adjacency=args.adjacency)


def _montecarlo(args, mech):
    import jax

    import jaxdp

    if args.samples < 1:
        raise ValueError(f"--samples must be an integer >= 1, got {args.samples}.")
    key = jax.random.key(args.seed)
    start = time.perf_counter()
    common = dict(num_steps=args.steps, key=key, num_samples=args.samples, estimator=args.estimator)
    if args.command == "epsilon":
        est = _with_progress("sampling", lambda: jaxdp.montecarlo_epsilon(mech, delta=args.delta, **common))
        eps, delta = float(est.value), args.delta
    else:
        est = _with_progress("sampling", lambda: jaxdp.montecarlo_delta(mech, epsilon=args.epsilon, **common))
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
        "mechanism": args.mechanism,
        "sigma": args.sigma,
        "q": args.q,
        "steps": args.steps,
        "adjacency": args.adjacency,
        **_sampling_record(args),
    }
    if args.group_size is not None:
        record["group_size"] = args.group_size
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


def _supports(method, mech):
    import jaxdp

    return jaxdp.method_info(method).supports(jaxdp.Composition.of((mech, 1)))


def _run(args):
    _check(args)
    import jaxdp
    from jaxdp.numerics import validate

    if args.command == "methods":
        infos = [jaxdp.method_info(name) for name in jaxdp.available_methods()]
        if args.json:
            record = {
                "methods": [
                    {"name": i.name, "certified": bool(i.certified), "description": i.description} for i in infos
                ]
            }
            return json.dumps(record), record
        lines = [f"{i.name:<14} certified={str(i.certified).lower():<5} {i.description}" for i in infos]
        return "\n".join(lines), None
    if args.command == "calibrate":
        return _calibrate(args)
    if args.command == "sweep":
        return _sweep(args)
    if args.command == "verify":
        return _verify(args)
    if args.command == "online":
        return _online(args)
    if args.command == "group-curve":
        return _group_curve(args)
    if args.command == "curve":
        return _curve(args)
    validate.positive("--sigma", args.sigma)
    if args.command == "epsilon":
        validate.open_unit("--delta", args.delta)
    else:
        validate.nonnegative("--epsilon", args.epsilon)
    mech = _mechanism(args)
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
    if companion is not None and not _supports(companion, mech):
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
        "mechanism": args.mechanism,
        "sigma": args.sigma,
        "q": args.q,
        "steps": args.steps,
        "adjacency": args.adjacency,
        **_sampling_record(args),
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
        if info.name == "saddlepoint-delta2":  # delta_2's distance to the split estimate, in epsilon
            gap = abs(float(terms.log_delta_plain) - float(terms.log_delta))
            indicator = gap / max(float(terms.saddle_point) * eps, 1e-300)
        else:
            indicator = float(terms.error_indicator)
        record["error_indicator"] = indicator
        if indicator > SADDLEPOINT_WARN:
            record["warning"] = _saddlepoint_warning(info.name, indicator)
    if args.group_size is not None:
        record["group_size"] = args.group_size
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
SADDLEPOINT_METHODS = ("saddlepoint", "saddlepoint-split", "saddlepoint-delta2")


def _saddlepoint_warning(name, indicator):
    better = "--method saddlepoint, " if name == "saddlepoint-delta2" else ""
    return (
        f"the saddle-point estimate's error indicator is {indicator:.1%} of epsilon (over 1 %): prefer "
        f"{better}--method characteristic, or the certified bound, for this setting"
    )


def _enable_compilation_cache():
    """Keep the command line's other compiled programs between runs (JAX's persistent cache).
    ``JAXDP_CACHE_DIR`` moves the cache (default ``$XDG_CACHE_HOME/jaxdp/xla``, i.e. ``~/.cache/jaxdp/xla``),
    ``JAXDP_CACHE_DIR=off`` turns it off, and a cache directory already configured for JAX is left alone."""
    import jax

    where = os.environ.get("JAXDP_CACHE_DIR")
    if where == "off" or jax.config.jax_compilation_cache_dir:
        return
    if not where:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        where = os.path.join(base, "jaxdp", "xla")
    try:
        os.makedirs(where, exist_ok=True)
    except OSError:  # read-only home: run uncached
        return
    jax.config.update("jax_compilation_cache_dir", where)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    # (the accountants' own programs are kept, compiled, by jaxdp.numerics.program_cache in ``where/programs``)


#: the built-in accountants' names (``jaxdp.available_methods()``; ``tests/test_cli.py`` checks the two agree),
#: and Monte Carlo: a ``--method`` is checked against them before JAX is imported
KNOWN_METHODS = (
    "rdp",
    "exact",
    "saddlepoint",
    "saddlepoint-split",
    "saddlepoint-delta2",
    "saddlepoint-certified",
    "certified",
    "certified-fast",
    "characteristic",
    "characteristic-real",
)
MONTECARLO = "montecarlo"


def _check(args):
    """The checks that need no accountant (pure Python, before JAX is imported): the method names and the
    sampling options (once: :func:`_run` calls it too, for a caller that parsed the arguments itself)."""
    if args.command == "methods" or getattr(args, "checked", False):
        return
    args.checked = True
    for option in ("method", "certify"):
        name = getattr(args, option, None)
        allowed = KNOWN_METHODS + ((MONTECARLO,) if option == "method" else ("none",))
        if name is not None and name not in allowed and not (option == "certify" and name.lower() == "none"):
            raise ValueError(f"--{option}: {option} must be one of {', '.join(map(repr, allowed))}, got {name!r}.")
    _resolve_sampling(args, q_default=None if args.command in ("calibrate", "sweep") else 1.0)


def main(argv=None) -> int:
    parser = build_parser()
    # the library's compile notice is for a person at a terminal: piped, stderr keeps its one line per error
    notices = logging.getLogger("jaxdp.compile")
    was_disabled = notices.disabled
    notices.disabled = was_disabled or not sys.stderr.isatty()
    try:
        args = parser.parse_args(argv)
        _check(args)
        _enable_compilation_cache()
        text, _ = _run(args)
    except (_UsageError, ValueError) as err:
        message = " ".join(str(err).split())
        print(f"jaxdp: error: {message}", file=sys.stderr)
        return 2
    finally:
        notices.disabled = was_disabled
    print(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
