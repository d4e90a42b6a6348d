"""Rényi-DP (moments) accountant with real orders and the tight conversion.

The RDP curve ``r(alpha) = sum_i n_i K_i(alpha - 1) / (alpha - 1)`` of a composition (quadrature for
mixtures, so any real order works) is converted to (epsilon, delta) by Canonne, Kamath & Steinke
(2020) / Asoodeh et al. (2021) and minimised over orders: a static grid of 200 orders
``alpha - 1 in [1e-2, 1e4]``, refined by golden-section search.  The conversion is a proven bound at
every order; an order whose quadrature is unresolved is ``+inf`` (skipped), never a finite guess.

Derivation and guarantees: ``docs/accountants/rdp.md``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxdp.accountants._registry import MethodInfo
from jaxdp.mechanisms import Composition
from jaxdp.numerics import log1p, minimize_on_grid

__all__ = ["LOG_ORDER_GRID", "epsilon_rdp", "log_delta_rdp", "rdp_curve"]

LOG_ORDER_GRID = np.linspace(np.log(1e-2), np.log(1e4), 200)


def rdp_curve(comp: Composition, direction: str, alpha):
    """``r(alpha)`` of the composition in one direction."""
    alpha = jnp.asarray(alpha, jnp.float64)
    return comp.cgf_upper(alpha - 1.0, direction) / (alpha - 1.0)


def _eps_at(comp, direction, log_delta):
    def f(u):
        am1 = jnp.exp(u)
        alpha = 1.0 + am1
        r = rdp_curve(comp, direction, alpha)
        return r + log1p(-1.0 / alpha) - (log_delta + jnp.log(alpha)) / am1

    return f


def epsilon_rdp(comp: Composition, direction: str, log_delta):
    """Smallest epsilon over orders (clamped at 0)."""
    value, _ = minimize_on_grid(_eps_at(comp, direction, log_delta), jnp.asarray(LOG_ORDER_GRID))
    return jnp.maximum(value, 0.0)


def log_delta_rdp(comp: Composition, direction: str, epsilon):
    """Smallest log delta over orders (clamped at 0)."""

    def f(u):
        am1 = jnp.exp(u)
        alpha = 1.0 + am1
        r = rdp_curve(comp, direction, alpha)
        return am1 * (r - epsilon + log1p(-1.0 / alpha)) - jnp.log(alpha)

    value, _ = minimize_on_grid(f, jnp.asarray(LOG_ORDER_GRID))
    return jnp.minimum(value, 0.0)


METHODS = (
    MethodInfo(
        "rdp",
        certified=True,
        description="Rényi DP over real orders with the Canonne-Kamath-Steinke conversion",
        log_delta=log_delta_rdp,
        epsilon=epsilon_rdp,
    ),
)
