"""The calibrated hyperparameters, each defined once for both searches (the host's over per-query programs and the
traced one): the log it is searched in, its bracket there, and the query at a value of it."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from jaxdp.calibration._result import SAMPLING_PROB_MIN, SIGMA_MIN, _psg_family
from jaxdp.mechanisms import PoissonSubsampledGaussian


class Param(NamedTuple):
    """A calibrated hyperparameter, searched in ``u``, a log of it: the bracket ``[lo, hi]``, the parameter's value
    at ``u``, and the query there, ``(mechanism, num_steps)`` given the parameter's value and the fixed
    hyperparameters.  ``count``: the parameter is a number of steps (epsilon increases along ``u``; the answer is a
    whole number at most ``limit``, certified as the largest count within budget, and has no derivative);
    otherwise epsilon decreases along ``u`` and the answer carries its implicit derivatives."""

    lo: object
    hi: object
    value: Callable  # u -> the parameter
    query: Callable  # (parameter, fixed) -> (mechanism, num_steps)
    count: bool = False
    limit: object = None  # (a count: the largest, exp(hi))


def param_of(solved_for: str, row, xp, mechanism=None) -> tuple[Param, tuple]:
    """``(spec, fixed)`` of one configuration: ``row`` is the calibrator's flat inputs ``(target, delta, ...)`` (in
    the order of the traced cores' arguments), ``xp`` the arithmetic (``math`` on the host, ``jax.numpy`` traced),
    ``fixed`` the hyperparameters the query takes besides the parameter (passed, not closed over: the traced
    search's implicit rule must not close over tracers).  ``mechanism``: a user's ``sigma -> mechanism``."""
    if solved_for == "noise_multiplier":  # u = log sigma
        _, _, sampling_prob, num_steps, sigma_max = row
        family = _psg_family if mechanism is None else (lambda sigma, _: mechanism(sigma))
        spec = Param(math.log(SIGMA_MIN), xp.log(sigma_max), xp.exp, lambda s, f: (family(s, f[1]), f[0]))
        return spec, (num_steps, sampling_prob)
    if solved_for == "sampling_prob":  # u = -log q
        _, _, sigma, num_steps = row
        spec = Param(
            0.0,
            -math.log(SAMPLING_PROB_MIN),
            lambda u: xp.exp(-u),
            lambda q, f: (PoissonSubsampledGaussian(f[1], q), f[0]),
        )
        return spec, (num_steps, sigma)
    if solved_for == "num_steps":  # u = log steps
        _, _, sigma, q, max_steps = row
        spec = Param(
            0.0,
            xp.log(max_steps),
            xp.exp,
            lambda n, f: (PoissonSubsampledGaussian(f[0], f[1]), n),
            count=True,
            limit=max_steps,
        )
        return spec, (sigma, q)
    raise ValueError(f"unknown calibrated parameter {solved_for!r}")
