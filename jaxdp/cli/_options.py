"""The command line's options: the parser, its shared option groups and the checks made before JAX is imported."""

from __future__ import annotations

import argparse
import math
import sys

MECHANISMS = ("poisson-gaussian", "gaussian", "laplace")
ADJACENCIES = ("add_or_remove", "remove", "add")
DEFAULT_METHOD = "certified"
#: the default for mechanisms the certified accountant does not cover
FALLBACK_METHOD = "delta2-certified"
ESTIMATORS = ("tilted", "tilted-one", "tilted-exact", "simple")


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message):  # one line, exit status 2
        # ("argument --sigma: --sigma must be > 0": a type's own message names its option already)
        head, _, rest = message.partition(": ")
        if head.startswith("argument ") and rest.startswith(head.removeprefix("argument ").split("/")[0] + " "):
            message = rest
        raise UsageError(message)


class _Help(argparse.HelpFormatter):
    """Help that shows each option's default (where it has one worth showing)."""

    def _get_help_string(self, action):
        text = action.help or ""
        # (identity, not ``in``: a default of 0 equals False and would be hidden)
        shown = all(action.default is not v for v in (None, False, argparse.SUPPRESS)) and "%(default)" not in text
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


def _floats(name, within=None):
    """argparse type: comma-separated numbers, each checked as :func:`_float` checks one (``within``: a range of
    ``_RANGES``, or ``"steps"``: integers >= 1)."""
    one = _int(name) if within == "steps" else _float(name, within)

    def parse(text):
        values = [v for v in text.split(",") if v.strip()]
        try:
            [float(v) for v in values]
        except ValueError:
            values = []
        if not values:
            raise argparse.ArgumentTypeError(f"{name} must be comma-separated numbers, got {text!r}")
        try:
            return [float(one(v)) for v in values]
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(f"{err} (in {name} {text})") from None

    return parse


def add_sampling(p, *, batch_sizes=False):
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


def resolve_sampling(args, *, q_default=1.0):
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


def sampling_record(args):
    if getattr(args, "sampling", "poisson") == "poisson" and getattr(args, "dataset_size", None) is None:
        return {}
    return {"sampling": args.sampling, "dataset_size": args.dataset_size, "batch_size": args.batch_size}


# -- shared option groups: each concept is declared once, with one name and one help text


def add_sigma(p, *, required=True, help="noise multiplier (> 0)"):
    p.add_argument("--sigma", type=_float("--sigma", "positive"), required=required, default=None, help=help)


def add_q(p, *, help="sampling probability in (0, 1]; 1 = no subsampling (default 1)"):
    p.add_argument("--q", type=_float("--q", "probability"), default=None, help=help)


def add_steps(p, *, required=True):
    p.add_argument("--steps", type=_steps, required=required, default=None, help="number of steps (integer >= 1)")


def add_last_step(p):
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


def add_delta(p, *, help="delta in (0, 1)"):
    p.add_argument("--delta", type=_float("--delta", "open_unit"), required=True, help=help)


def add_target_epsilon(p):
    p.add_argument(
        "--target-epsilon", type=_float("--target-epsilon", "positive"), required=True, help="the budget (> 0)"
    )


def add_adjacency(p):
    p.add_argument("--adjacency", choices=ADJACENCIES, default="add_or_remove", help="neighbouring datasets")


def add_group_size(p, *, help="group privacy for k records (default 1)"):
    p.add_argument("--group-size", type=_int("--group-size"), default=None, help=help)


def add_seed(p, *, help="seed of the Monte Carlo samples"):
    p.add_argument("--seed", type=int, default=0, help=help)


def add_epsilon(p, *, help):
    p.add_argument("--epsilon", type=_float("--epsilon", "nonnegative"), required=True, help=help)


def add_samples(p, *, default, help):
    p.add_argument("--samples", type=_int("--samples"), default=default, help=help)


def add_method(p, *, default, help):
    p.add_argument("--method", default=default, help=help)


def add_certify(p, *, default, help="certified accountant of the final check ('none' to skip it)"):
    p.add_argument("--certify", default=default, help=help)


def add_json(p, *, help="print one JSON object"):
    p.add_argument("--json", action="store_true", help=help)


def add_outputs(p, *, csv="print CSV"):
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print one JSON object")
    fmt.add_argument("--csv", action="store_true", help=csv)
    p.add_argument("--plot", default=None, help="write a plot (PNG, needs matplotlib: pip install 'jaxdp[plot]')")


def _add_query(p):
    """The options of ``epsilon`` and ``delta``."""
    add_sigma(p)
    add_q(p)
    add_steps(p)
    p.add_argument("--mechanism", choices=MECHANISMS, default="poisson-gaussian", help="the mechanism of each step")
    add_group_size(p)
    add_adjacency(p)
    add_sampling(p)
    add_method(
        p,
        default=None,
        help=f"accountant (see `jaxdp methods`); default {DEFAULT_METHOD!r} ({FALLBACK_METHOD!r} for laplace)",
    )
    add_samples(p, default=1_000_000, help="Monte Carlo samples (--method montecarlo)")
    add_seed(p, help="Monte Carlo seed (--method montecarlo)")
    p.add_argument(
        "--estimator", choices=ESTIMATORS, default="tilted", help="Monte Carlo estimator (--method montecarlo)"
    )
    add_json(p)


def build_parser():
    from jaxdp import __version__

    parser = Parser(prog="jaxdp", description="Differential-privacy accounting for DP-SGD and friends.")
    parser.add_argument("--version", action="version", version=f"jaxdp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    pe = sub.add_parser("epsilon", help="epsilon for a target delta")
    _add_query(pe)
    add_delta(pe, help="target delta in (0, 1)")
    pd = sub.add_parser("delta", help="delta for a target epsilon")
    _add_query(pd)
    add_epsilon(pd, help="target epsilon (>= 0)")

    pc = sub.add_parser("calibrate", help="noise multiplier (or q, or steps) for a privacy budget")
    add_target_epsilon(pc)
    add_delta(pc)
    pc.add_argument(
        "--solve-for",
        choices=("sigma", "q", "steps"),
        default="sigma",
        help="the parameter solved for; the other two are given",
    )
    add_sigma(pc, required=False, help="noise multiplier (when solving for q or steps)")
    add_q(pc, help="sampling probability in (0, 1] (when solving for sigma or steps)")
    add_steps(pc, required=False)
    add_group_size(pc, help="group privacy for k records (solving for sigma)")
    add_sampling(pc)
    pc.add_argument("--sigma-max", type=_float("--sigma-max", "positive"), default=100.0, help="largest sigma searched")
    pc.add_argument(
        "--steps-max",
        "--max-steps",
        dest="steps_max",
        type=_int("--steps-max"),
        default=10**7,
        help="largest number of steps searched (--max-steps: its earlier name, deprecated: elsewhere it is --steps)",
    )
    add_method(pc, default="characteristic", help="estimate that drives the search")
    add_certify(pc, default="certified-fast")
    add_json(pc)

    ps = sub.add_parser("sweep", help="calibrate sigma on a grid of (q, steps); CSV and an optional heatmap")
    add_target_epsilon(ps)
    add_delta(ps)
    ps.add_argument(
        "--q", type=_floats("--q", "probability"), default=None, help="comma-separated sampling probabilities in (0, 1]"
    )
    add_sampling(ps, batch_sizes=True)
    ps.add_argument(
        "--steps",
        type=_floats("--steps", "steps"),
        required=True,
        help="comma-separated numbers of steps (integers >= 1)",
    )
    add_method(ps, default="saddlepoint", help="estimate that drives the search")
    add_certify(ps, default="certified-fast", help="certified accountant of the check ('none' to skip it)")
    ps.add_argument("--out", default=None, help="CSV file (default: standard output)")
    ps.add_argument("--plot", default=None, help="heatmap of sigma over the grid (PNG, needs matplotlib)")
    add_json(ps, help="print one JSON object (the CSV still goes to --out)")

    pv = sub.add_parser("verify", help="estimate-verify-release: Monte Carlo check of an estimated (epsilon, delta)")
    add_sigma(pv)
    add_q(pv)
    add_sampling(pv)
    add_steps(pv)
    add_adjacency(pv)
    add_epsilon(pv, help="the candidate epsilon (>= 0)")
    pv.add_argument("--delta-est", type=_float("--delta-est", "open_unit"), required=True, help="the estimated delta")
    pv.add_argument("--tau", type=_float("--tau", "open_unit"), default=0.9, help="tolerated underestimate in (0, 1)")
    add_seed(pv, help="seed of the verifier's samples")
    pv.add_argument("--max-samples", type=_int("--max-samples"), default=10**8, help="most samples per direction")
    add_json(pv)

    po = sub.add_parser("online", help="Monte Carlo epsilon after every step, from one sample set")
    add_sigma(po)
    add_q(po)
    add_sampling(po)
    add_last_step(po)
    add_delta(po)
    add_adjacency(po)
    add_samples(po, default=100_000, help="sample paths")
    add_seed(po)
    add_outputs(po, csv="print CSV: step, epsilon, stderr, ci_low, ci_high")

    pg = sub.add_parser("group-curve", help="epsilon against the group size, beside the black-box conversion")
    add_sigma(pg)
    add_q(pg)
    add_steps(pg)
    add_delta(pg)
    pg.add_argument(
        "--group-size",
        "--max-group",
        metavar="GROUP_SIZE",
        dest="max_group",
        type=_int("--group-size"),
        required=True,
        help="the largest group size G (--max-group: its earlier name)",
    )
    add_adjacency(pg)
    add_method(pg, default=None, help=f"accountant (default {DEFAULT_METHOD!r})")
    add_sampling(pg)
    add_outputs(pg)

    pk = sub.add_parser("curve", help="epsilon against the number of steps: estimate and certified bound")
    add_sigma(pk)
    add_q(pk)
    add_last_step(pk)
    add_delta(pk)
    pk.add_argument("--points", type=_int("--points"), default=40, help="numbers of steps evaluated (log-spaced)")
    add_group_size(pk)
    add_adjacency(pk)
    add_method(pk, default="characteristic", help="the estimate")
    add_certify(pk, default="certified", help="the certified bound ('none' to skip it)")
    add_sampling(pk)
    add_outputs(pk)

    pm = sub.add_parser("methods", help="list the accountants")
    add_json(pm)
    return parser


KNOWN_METHODS = (
    "rdp",
    "exact",
    "saddlepoint",
    "delta2",
    "delta2-certified",
    "certified",
    "certified-fast",
    "characteristic",
    "gil-pelaez",
)
#: the library's ``DEPRECATED_METHODS`` (old name -> new), here too: read before JAX is imported
DEPRECATED_METHODS = {
    "saddlepoint-split": "saddlepoint",
    "saddlepoint-delta2": "delta2",
    "saddlepoint-certified": "delta2-certified",
    "characteristic-real": "gil-pelaez",
}
MONTECARLO = "montecarlo"


def check(args):
    """The checks that need no accountant (pure Python, before JAX is imported): the method names and the
    sampling options (once: :func:`jaxdp.cli.run` calls it too, for a caller that parsed the arguments itself)."""
    if args.command == "methods" or getattr(args, "checked", False):
        return
    args.checked = True
    for option in ("method", "certify"):
        name = getattr(args, option, None)
        if name in DEPRECATED_METHODS:
            print(
                f"jaxdp: note: --{option} {name} is deprecated and will be removed in the next release: it is now "
                f"{DEPRECATED_METHODS[name]} (the same method).",
                file=sys.stderr,
            )
            name = DEPRECATED_METHODS[name]
            setattr(args, option, name)
        allowed = KNOWN_METHODS + ((MONTECARLO,) if option == "method" else ("none",))
        if name is not None and name not in allowed and not (option == "certify" and name.lower() == "none"):
            raise ValueError(f"--{option}: {option} must be one of {', '.join(map(repr, allowed))}, got {name!r}.")
    resolve_sampling(args, q_default=None if args.command in ("calibrate", "sweep") else 1.0)
    if args.command == "calibrate":
        _check_calibrate(args)
    from jaxdp.cli._mechanism import check_mechanism

    check_mechanism(args)


#: what each ``--solve-for`` needs given
_SOLVE_FOR_NEEDS = {"sigma": ("q", "steps"), "q": ("sigma", "steps"), "steps": ("sigma", "q")}


def _check_calibrate(args):
    if args.sampling == "fixed" and args.solve_for != "sigma":
        raise ValueError("--sampling fixed calibrates the noise multiplier only (--solve-for sigma).")
    # (fixed batches: q is B / N; solving for sigma with a group, q may be left at 1)
    needs = ("steps",) if args.solve_for == "sigma" and args.sampling == "fixed" else _SOLVE_FOR_NEEDS[args.solve_for]
    for name in needs:
        if getattr(args, name) is None:
            raise ValueError(f"--solve-for {args.solve_for} needs --{name}.")
