"""The one builder from the command line's options to a mechanism."""

from __future__ import annotations

import types


def mechanism_of(args, sigma=None):
    """The mechanism the options describe, at noise multiplier ``sigma`` (default ``--sigma``).

    Every subcommand builds its mechanism here; the options a subcommand lacks take their defaults
    (``--mechanism poisson-gaussian``, no ``--group-size``, ``--adjacency add_or_remove``).  A calibration's
    family is ``functools.partial(mechanism_of, args)``.
    """
    import jaxdp

    sigma = args.sigma if sigma is None else sigma
    group = getattr(args, "group_size", None)
    adjacency = getattr(args, "adjacency", "add_or_remove")
    mechanism = getattr(args, "mechanism", "poisson-gaussian")
    if args.sampling == "fixed":
        return jaxdp.MixtureOfGaussians.fixed_batch_group(
            sigma,
            dataset_size=args.dataset_size,
            batch_size=args.batch_size,
            group_size=group or 1,
            adjacency=adjacency,
        )
    if mechanism == "laplace":
        return jaxdp.Laplace(sigma, adjacency=adjacency)
    if group is not None and (group > 1 or args.q < 1.0):
        return jaxdp.MixtureOfGaussians.poisson_group(sigma, args.q, group, adjacency=adjacency)
    if args.q == 1.0:
        return jaxdp.Gaussian(sigma, adjacency=adjacency)
    return jaxdp.PoissonSubsampledGaussian(sigma, args.q, adjacency=adjacency)


def check_mechanism(args):
    """The options' consistency, in pure Python: ``_options.check`` calls it before JAX is imported, once per run
    (not :func:`mechanism_of`, which a calibration calls at every noise multiplier it tries)."""
    mechanism = getattr(args, "mechanism", "poisson-gaussian")
    q, group = getattr(args, "q", None), getattr(args, "group_size", None)
    if getattr(args, "sampling", "poisson") == "fixed" and mechanism != "poisson-gaussian":
        raise ValueError("--sampling fixed is a subsampled Gaussian: leave --mechanism at poisson-gaussian.")
    if mechanism == "laplace" and ((q is not None and q != 1.0) or group):
        raise ValueError("--mechanism laplace takes no --q or --group-size.")
    if mechanism == "gaussian" and q is not None and q != 1.0:
        raise ValueError("--mechanism gaussian means no subsampling; use --q 1 or --mechanism poisson-gaussian.")


def with_options(args, **changes):
    """A copy of ``args`` with some options changed (e.g. one batch size of a sweep)."""
    return types.SimpleNamespace(**{**vars(args), **changes})


def describe_sampling(args):
    if args.sampling == "fixed":
        return f"fixed batches of {args.batch_size} out of {args.dataset_size}"
    return f"Poisson sampling, q = {args.q:g}" if args.q != 1.0 else "no subsampling"
