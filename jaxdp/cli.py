"""The ``jaxdp`` command line.

    jaxdp epsilon --sigma 1.0 --q 0.01 --steps 2000 --delta 1e-5 [--method M] [--json]
    jaxdp delta   --sigma 1.0 --q 0.01 --steps 2000 --epsilon 2.0 [--method M] [--json]

Bad input exits with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

MECHANISMS = ("poisson-gaussian", "gaussian", "laplace")
ADJACENCIES = ("add_or_remove", "remove", "add")
DEFAULT_METHOD = "certified"
#: the default for mechanisms the certified accountant does not cover
FALLBACK_METHOD = "saddlepoint-certified"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit status 2
        raise _UsageError(message)


def _float(name):
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        return value

    return parse


def _steps(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--steps must be an integer >= 1, got {text!r}") from None
    if not math.isfinite(value) or value != int(value) or value < 1:
        raise argparse.ArgumentTypeError(f"--steps must be an integer >= 1, got {text!r}")
    return int(value)


def _add_common(p):
    p.add_argument("--sigma", type=_float("--sigma"), required=True, help="noise multiplier (> 0)")
    p.add_argument("--q", type=_float("--q"), default=1.0, help="sampling probability in (0, 1]; 1 = no subsampling")
    p.add_argument("--steps", type=_steps, required=True, help="number of steps (integer >= 1)")
    p.add_argument("--mechanism", choices=MECHANISMS, default="poisson-gaussian")
    p.add_argument("--group-size", type=int, default=None, help="group privacy for k records (Poisson sampling)")
    p.add_argument("--adjacency", choices=ADJACENCIES, default="add_or_remove")
    p.add_argument(
        "--method",
        default=None,
        help=f"accountant (see `jaxdp methods`); default {DEFAULT_METHOD!r} ({FALLBACK_METHOD!r} for laplace)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def build_parser():
    parser = _Parser(prog="jaxdp", description="Differential-privacy accounting for DP-SGD and friends.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    pe = sub.add_parser("epsilon", help="epsilon for a target delta")
    _add_common(pe)
    pe.add_argument("--delta", type=_float("--delta"), required=True, help="target delta in (0, 1)")
    pd = sub.add_parser("delta", help="delta for a target epsilon")
    _add_common(pd)
    pd.add_argument("--epsilon", type=_float("--epsilon"), required=True, help="target epsilon (>= 0)")
    sub.add_parser("methods", help="list the accountants")
    return parser


def _mechanism(args):
    import jaxdp

    if args.mechanism == "laplace":
        if args.q != 1.0 or args.group_size:
            raise ValueError("--mechanism laplace takes no --q or --group-size.")
        return jaxdp.Laplace(args.sigma, adjacency=args.adjacency)
    if args.mechanism == "gaussian" and args.q != 1.0:
        raise ValueError("--mechanism gaussian means no subsampling; use --q 1 or --mechanism poisson-gaussian.")
    jaxdp._validate.probability("--q", args.q)
    if args.group_size is not None:
        if args.group_size < 1:
            raise ValueError(f"--group-size must be an integer >= 1, got {args.group_size}.")
        if args.group_size > 1 or args.q < 1.0:
            return jaxdp.MixtureOfGaussians.poisson_group(args.sigma, args.q, args.group_size, adjacency=args.adjacency)
    if args.q == 1.0:
        return jaxdp.Gaussian(args.sigma, adjacency=args.adjacency)
    return jaxdp.PoissonSubsampledGaussian(args.sigma, args.q, adjacency=args.adjacency)


def _run(args):
    import jaxdp

    if args.command == "methods":
        lines = []
        for name in jaxdp.available_methods():
            info = jaxdp.method_info(name)
            lines.append(f"{name:<14} certified={str(info.certified).lower():<5} {info.description}")
        return "\n".join(lines), None
    jaxdp._validate.positive("--sigma", args.sigma)
    if args.method is None:
        args.method = FALLBACK_METHOD if args.mechanism == "laplace" else DEFAULT_METHOD
    info = jaxdp.method_info(args.method)
    if args.command == "epsilon":
        jaxdp._validate.open_unit("--delta", args.delta)
    else:
        jaxdp._validate.nonnegative("--epsilon", args.epsilon)
    mech = _mechanism(args)
    start = time.perf_counter()
    if args.command == "epsilon":
        eps = float(jaxdp.epsilon_for_delta(mech, delta=args.delta, num_steps=args.steps, method=args.method))
        delta = args.delta
    else:
        delta = float(jaxdp.delta_for_epsilon(mech, epsilon=args.epsilon, num_steps=args.steps, method=args.method))
        eps = args.epsilon
    seconds = time.perf_counter() - start
    if not math.isfinite(eps) or not math.isfinite(delta):
        raise ValueError("the accountant returned a non-finite value; check the arguments.")
    upper = None
    companion = info.companion
    if companion == DEFAULT_METHOD and args.mechanism == "laplace":
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
    }
    if upper is not None:
        record["estimate"] = eps if args.command == "epsilon" else delta
        record["certified_upper"] = upper
        record["certified_upper_method"] = companion
    if args.group_size is not None:
        record["group_size"] = args.group_size
    if args.json:
        return json.dumps(record), record
    kind = "proven upper bound" if info.certified else "estimate (not a proven bound)"
    sampled = f", q = {args.q:g}" if args.q != 1.0 else ""
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
    return text, record


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        text, _ = _run(args)
    except (_UsageError, ValueError) as err:
        message = " ".join(str(err).split())
        print(f"jaxdp: error: {message}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
