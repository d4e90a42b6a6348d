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

Bad input exits with status 2 and one line on stderr, before JAX is imported.  The package's rooms: ``_options``
(the parser, shared option groups, the checks made without JAX), ``_mechanism`` (options to a mechanism),
one module per family of subcommands (``_query``, ``_calibrate``, ``_monitor``, ``_curves``) and ``_render``
(progress, plots, the compilation cache).
"""

from __future__ import annotations

import logging
import sys

from jaxdp.cli import _calibrate, _curves, _monitor, _query
from jaxdp.cli._options import UsageError, build_parser, check
from jaxdp.cli._render import enable_compilation_cache

__all__ = ["build_parser", "main", "run"]

#: each subcommand's handler: ``handler(args) -> (text, record or None)``
COMMANDS = {
    "epsilon": _query.query,
    "delta": _query.query,
    "methods": _query.methods,
    "calibrate": _calibrate.calibrate,
    "sweep": _calibrate.sweep,
    "verify": _monitor.verify,
    "online": _monitor.online,
    "group-curve": _curves.group_curve,
    "curve": _curves.curve,
}


def run(args):
    """Answers parsed arguments: ``(text, record)``, the record being what ``--json`` prints (or None)."""
    check(args)
    return COMMANDS[args.command](args)


def main(argv=None) -> int:
    parser = build_parser()
    # the library's compile notice is for a person at a terminal: piped, stderr keeps its one line per error
    notices = logging.getLogger("jaxdp.compile")
    was_disabled = notices.disabled
    notices.disabled = was_disabled or not sys.stderr.isatty()
    try:
        args = parser.parse_args(argv)
        check(args)
        enable_compilation_cache()
        text, _ = run(args)
    except (UsageError, ValueError) as err:
        message = " ".join(str(err).split())
        print(f"jaxdp: error: {message}", file=sys.stderr)
        return 2
    finally:
        notices.disabled = was_disabled
    print(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
