"""Saddle-point accountant (Alghamdi, Gomez, Asoodeh, Calmon, Kosut & Sankar, ICML 2023).

For the composed privacy loss ``L`` with cumulant generating function
``K(t) = sum_i n_i K_i(t)`` (count-weighted per-mechanism CGFs), and any
``t > 0``,

    delta(eps) = (1/2 pi) int exp(F(t + is)) ds,   F(z) = K(z) - z eps - log z - log(1 + z).

The saddle point ``t*`` solves ``F'(t*) = 0``, i.e.
``K'(t*) = eps + 1/t* + 1/(1 + t*)`` (unique: ``K'`` increases, the right side
decreases).  With ``Z ~ N(K'(t*), K''(t*))``:

* ``delta_1 = exp(K - eps t*) / sqrt(2 pi [t*^2 (1+t*)^2 K'' + t*^2 + (1+t*)^2])``
  (vanilla saddle-point approximation),
* ``delta_2 = exp(K - eps t*) E[exp(t*(eps - Z)) (1 - exp(eps - Z))_+]`` in closed form
  (two Gaussian tail terms, combined in log space with ``log_ndtr``),
* error bound ``|delta - delta_2| <= exp(K - eps t*) (t*/(1+t*))^t* P / K''^{3/2}`` with
  ``P = sum_i n_i E|L~_i - E L~_i|^3`` over the per-step losses tilted by ``exp(t* L)``.

``K'``, ``K''`` (and ``K'''`` where a Newton derivative needs it) come from JAX
autodiff of the CGF, not from hand-derived formulas.  Every root solve is a
bracketed, safeguarded Newton iteration in ``log t`` with implicit
differentiation (``jax.lax.custom_root``), so gradients with respect to the
noise multiplier and the sampling probability are exact, not unrolled.

epsilon(delta) is solved jointly: along the saddle-point curve
``eps(t) = K'(t) - 1/t - 1/(1+t)`` the target ``log delta_hat(t, eps(t)) = log delta`` is a
single decreasing equation in ``log t``.

Formal guarantees (method ``"saddlepoint-certified"``): ``min(1, delta_2 + bound)`` is an upper
bound on delta(eps) by the error theorem above (as stated on the ICML 2023 paper's slides,
``../papers/003``), *assuming* the CGF derivatives and the tilted third moments are
exact.  They come from the quadrature of :mod:`jaxdp._quadrature` (relative
error ~1e-10, validated against mpmath); the third moments are inflated by
0.1 % to cover their quadrature error (the ``|x|^3`` kink limits that rule to
~1e-5 relative).  The certified epsilon(delta) adds a relative margin of
1e-10 to the root of ``delta_upper(eps) = delta``.  ``"saddlepoint"`` returns the
estimate ``delta_2`` and is *not* a bound.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxdp._mechanisms import Composition
from jaxdp._numerics import log_ndtr, log_sub_exp
from jaxdp._solvers import solve_decreasing

__all__ = [
    "SaddlePointResult",
    "epsilon_saddlepoint",
    "epsilon_saddlepoint_upper",
    "log_delta_saddlepoint",
    "log_delta_saddlepoint_upper",
    "saddle_point",
    "saddlepoint_terms",
]

LOG_T_LO = math.log(1e-6)
LOG_T_HI = math.log(1e7)
MOMENT_INFLATION = 1.001
EPS_MARGIN = 1e-10


class SaddlePointResult(NamedTuple):
    """Saddle-point quantities for one epsilon (all float64; deltas in log space).

    Attributes:
      saddle_point: ``t*``.
      log_delta_vanilla: ``log delta_1``.
      log_delta: ``log delta_2`` (the estimate).
      log_error_bound: log of the error bound.
      log_delta_upper: ``log min(1, delta_2 + bound)`` (certified upper bound).
    """

    saddle_point: jax.Array
    log_delta_vanilla: jax.Array
    log_delta: jax.Array
    log_error_bound: jax.Array
    log_delta_upper: jax.Array


def _k01(comp, direction, t):
    return jax.jvp(lambda s: comp.cgf(s, direction), (t,), (jnp.ones_like(t),))


def _k012(comp, direction, t):
    (k0, k1), (_, k2) = jax.jvp(lambda s: _k01(comp, direction, s), (t,), (jnp.ones_like(t),))
    return k0, k1, k2


def _mu2(comp):
    return jax.lax.stop_gradient(jnp.maximum(comp.gaussian_mu2(), 1e-300))


def _clip_log_t(u):
    return jnp.clip(u, LOG_T_LO, LOG_T_HI)


def _guess_log_t_for_epsilon(comp, epsilon):
    """Saddle point of the Gaussian pair with the same ``K(1)`` (a starting point)."""
    mu2 = _mu2(comp)
    t = jnp.maximum(epsilon / mu2, 1.0)
    for _ in range(4):  # Newton on mu2 (t + 1/2) - eps - 1/t - 1/(1+t), convex-increasing
        f = mu2 * (t + 0.5) - epsilon - 1.0 / t - 1.0 / (1.0 + t)
        df = mu2 + 1.0 / (t * t) + 1.0 / (1.0 + t) ** 2
        t = jnp.maximum(t - f / df, 0.5 * t)
    return _clip_log_t(jnp.log(t))


def _guess_log_t_for_delta(comp, log_delta):
    """For the Gaussian pair, t* ~ sqrt(2 log(1/delta)) / mu."""
    mu2 = _mu2(comp)
    return _clip_log_t(0.5 * jnp.log(2.0 * jnp.maximum(-log_delta, 1e-3) / mu2))


def saddle_point(comp: Composition, direction: str, epsilon):
    """``t*`` solving ``K'(t) = eps + 1/t + 1/(1+t)`` (differentiable)."""

    def h(u):  # decreasing in u = log t
        t = jnp.exp(u)
        _, k1 = _k01(comp, direction, t)
        return -(k1 - epsilon - 1.0 / t - 1.0 / (1.0 + t))

    u0 = _guess_log_t_for_epsilon(comp, epsilon)
    return jnp.exp(solve_decreasing(h, jnp.float64(LOG_T_LO), jnp.float64(LOG_T_HI), x0=u0))


def _log_deltas(k0, k1, k2, t, epsilon):
    """``(log delta_2, log delta_1)`` at ``t`` from ``K, K', K''``."""
    a = k1 - epsilon
    s = jnp.sqrt(k2)

    def log_term(c):  # log E[exp(-c U) 1{U > 0}], U ~ N(a, k2)
        return -c * a + 0.5 * c * c * k2 + log_ndtr((a - c * k2) / s)

    log_e = log_sub_exp(log_term(t), log_term(t + 1.0))
    base = k0 - epsilon * t
    log_d2 = base + log_e
    log_d1 = base - 0.5 * jnp.log(2.0 * math.pi * (t * t * (1.0 + t) ** 2 * k2 + t * t + (1.0 + t) ** 2))
    return log_d2, log_d1


def _log_bound(comp, direction, k0, k2, t, epsilon):
    p3 = MOMENT_INFLATION * comp.tilted_abs_moment(t, direction)
    return k0 - epsilon * t + t * jnp.log(t / (1.0 + t)) + jnp.log(p3) - 1.5 * jnp.log(k2)


def _clip_log_delta(x):
    return jnp.minimum(x, 0.0)


def saddlepoint_terms(comp: Composition, direction: str, epsilon) -> SaddlePointResult:
    """All saddle-point quantities at ``epsilon`` for one direction."""
    t = saddle_point(comp, direction, epsilon)
    k0, k1, k2 = _k012(comp, direction, t)
    log_d2, log_d1 = _log_deltas(k0, k1, k2, t, epsilon)
    log_b = _log_bound(comp, direction, k0, k2, t, epsilon)
    upper = _clip_log_delta(jnp.logaddexp(log_d2, log_b))
    return SaddlePointResult(t, _clip_log_delta(log_d1), _clip_log_delta(log_d2), log_b, upper)


def log_delta_saddlepoint(comp, direction, epsilon):
    """``log delta_2(eps)`` (estimate)."""
    return saddlepoint_terms(comp, direction, epsilon).log_delta


def log_delta_saddlepoint_upper(comp, direction, epsilon):
    """``log min(1, delta_2 + bound)`` (certified upper bound)."""
    return saddlepoint_terms(comp, direction, epsilon).log_delta_upper


def _eps_along_curve(comp, direction, t):
    k0, k1, k2 = _k012(comp, direction, t)
    eps = k1 - 1.0 / t - 1.0 / (1.0 + t)
    return eps, k0, k1, k2


def _solve_epsilon(comp, direction, log_delta, certified: bool):
    def g(u):  # decreasing in u = log t
        t = jnp.exp(u)
        eps, k0, k1, k2 = _eps_along_curve(comp, direction, t)
        log_d2, _ = _log_deltas(k0, k1, k2, t, eps)
        if certified:
            log_d2 = jnp.logaddexp(log_d2, _log_bound(comp, direction, k0, k2, t, eps))
        return log_d2 - log_delta

    u0 = _guess_log_t_for_delta(comp, log_delta)
    u = solve_decreasing(g, jnp.float64(LOG_T_LO), jnp.float64(LOG_T_HI), x0=u0, max_jump=2.0)
    eps, *_ = _eps_along_curve(comp, direction, jnp.exp(u))
    if certified:
        eps = eps + EPS_MARGIN * (1.0 + jnp.abs(eps))
    return jnp.maximum(eps, 0.0)


def epsilon_saddlepoint(comp, direction, log_delta):
    """epsilon with ``delta_2(eps) = delta`` (estimate)."""
    return _solve_epsilon(comp, direction, log_delta, certified=False)


def epsilon_saddlepoint_upper(comp, direction, log_delta):
    """epsilon with ``min(1, delta_2 + bound)(eps) = delta`` (certified)."""
    return _solve_epsilon(comp, direction, log_delta, certified=True)
