"""Closed-form privacy curve of composed Gaussian mechanisms (Balle & Wang 2018).

A composition of Gaussian mechanisms with noise multipliers ``s_i`` applied
``n_i`` times is exactly the Gaussian mechanism with ``mu^2 = sum_i n_i / s_i^2``
(Dong, Roth & Su 2019), and

    delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2).

Both terms are evaluated as ``log_ndtr`` and subtracted in log space
(``log_sub_exp``), so delta values down to ~1e-300 and below stay
representable.  epsilon(delta) solves ``log delta(eps) = log delta`` with the
safeguarded Newton iteration of :mod:`jaxdp.numerics._solvers` (implicit gradients).

Derivation and guarantees: ``docs/accountants/exact.md``.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxdp.accountants._registry import MethodInfo
from jaxdp.mechanisms import Composition, Gaussian
from jaxdp.numerics import log_ndtr, log_sub_exp, solve_decreasing

__all__ = ["epsilon_gaussian", "gaussian_mu", "log_delta_gaussian"]


def gaussian_mu(comp: Composition):
    """``mu`` of a composition of Gaussian mechanisms (ValueError otherwise)."""
    mu2 = 0.0
    for m, n in zip(comp.mechanisms, comp.counts):
        if not isinstance(m, Gaussian):
            raise ValueError(
                "method='exact' supports only Gaussian mechanisms and compositions of them, "
                f"got {type(m).__name__}; use another method (e.g. method='rdp')."
            )
        s = jnp.asarray(m.noise_multiplier, jnp.float64)
        mu2 = mu2 + jnp.sum(jnp.asarray(n, jnp.float64) / (s * s))  # (a stack: one count per segment)
    return jnp.sqrt(mu2)


def log_delta_gaussian(mu, epsilon):
    """``log delta(eps)`` of the Gaussian mechanism with parameter ``mu``."""
    a = -epsilon / mu + 0.5 * mu
    b = -epsilon / mu - 0.5 * mu
    return log_sub_exp(log_ndtr(a), epsilon + log_ndtr(b))


def epsilon_gaussian(mu, log_delta):
    """Smallest ``eps >= 0`` with ``delta(eps) <= exp(log_delta)``."""
    hi = 0.5 * mu * mu + mu * jnp.sqrt(2.0 * jnp.maximum(-log_delta, 0.0)) + 1.0

    def f(eps):
        return log_delta_gaussian(mu, eps) - log_delta

    eps = solve_decreasing(f, jnp.zeros_like(hi), hi)
    return jnp.where(f(0.0) <= 0, 0.0, eps)


def _all_gaussian(comp: Composition) -> bool:
    return all(isinstance(m, Gaussian) for m in comp.mechanisms)


def _exact_log_delta(comp, direction, epsilon):
    return log_delta_gaussian(gaussian_mu(comp), epsilon)


def _exact_epsilon(comp, direction, log_delta):
    return epsilon_gaussian(gaussian_mu(comp), log_delta)


METHODS = (
    MethodInfo(
        "exact",
        certified=True,
        description="closed-form delta(eps) of composed Gaussian mechanisms",
        log_delta=_exact_log_delta,
        epsilon=_exact_epsilon,
        supports=_all_gaussian,
    ),
)
