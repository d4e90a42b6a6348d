"""Real-axis inversion of the characteristic function (Lévy / Gil-Pelaez) -- a baseline.

    delta(eps) = Pr_P[L > eps] - e^eps Pr_Q[L > eps],
    Pr[L > eps] = 1/2 + (1/pi) int_0^inf Im[exp(-i s eps) phi(s)] / s ds,

with ``phi_P(s) = exp(K(is))`` and ``phi_Q(s) = exp(K(-1 + is))`` (Zhu, Dong &
Wang, AISTATS 2022).  The integrals use the same trapezoidal rule and per-step
characteristic functions as :mod:`jaxdp.accountants._characteristic` (contour at ``t = 0``
and ``t = -1``).

Why it is only a baseline: the two tail probabilities are computed to an
*absolute* accuracy of ~1e-16 (float64 rounding of numbers of order one) and
delta is their difference.  Once delta falls below ~1e-10 the cancellation
leaves no correct digit, and below ~1e-16 the result is noise (possibly
negative, reported as ``log delta = -inf``).  ``benchmarks/bench_characteristic.py``
tabulates where it breaks; the contour method of :mod:`jaxdp.accountants._characteristic`
does not have this problem.  Method ``"gil-pelaez"`` is an estimate.

Derivation and limits: ``docs/accountants/characteristic.md``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxdp.accountants import _bounds, _cgf
from jaxdp.accountants._registry import MethodInfo
from jaxdp.mechanisms import Composition
from jaxdp.numerics import solve_decreasing

__all__ = ["epsilon_gil_pelaez", "log_delta_gil_pelaez"]

#: Half-period of the aliasing window in standard deviations of L.
_SPAN_SD = 14.0


def _log_phi_line(comp: Composition, direction: str, t, eps_max):
    """``(ds, log phi(t + i s_k), E_t L)`` for the law tilted by ``exp(t L)``, untilted phase."""
    t = jnp.asarray(t, jnp.float64)
    sg = jax.lax.stop_gradient(comp)
    _, k1, k2 = _cgf.k012(sg, direction, t)
    span = jnp.abs(k1) + eps_max + _SPAN_SD * jnp.sqrt(k2)
    nodes, s_res = _cgf.line_nodes(comp, direction, t)
    ds = jax.lax.stop_gradient(jnp.minimum(math.pi / span, s_res / _cgf.NUM_NODES))
    log_phi = _cgf.composed_log_phi(comp, direction, t, nodes, ds)
    _, mean = _cgf.k01(comp, direction, t)
    return ds, log_phi, mean


def _tail(ds, log_phi, mean, eps):
    """``Pr[L > eps]`` by the Gil-Pelaez integral (trapezoidal rule)."""
    s = ds * jnp.arange(_cgf.NUM_NODES, dtype=jnp.float64)
    safe_s = jnp.where(s > 0, s, 1.0)
    g = jnp.imag(jnp.exp(log_phi - 1j * s * eps)) / safe_s
    g = g.at[0].set(mean - eps)
    weights = jnp.ones(_cgf.NUM_NODES).at[0].set(0.5)
    return 0.5 + ds / math.pi * jnp.sum(weights * g)


def _delta_fn(comp, direction, eps_max):
    line_p = _log_phi_line(comp, direction, 0.0, eps_max)
    line_q = _log_phi_line(comp, direction, -1.0, eps_max)

    def delta(eps):
        return _tail(*line_p, eps) - jnp.exp(eps) * _tail(*line_q, eps)

    return delta


def _log_pos(x):
    return jnp.where(x > 0, jnp.log(jnp.where(x > 0, x, 1.0)), -jnp.inf)


def log_delta_gil_pelaez(comp, direction, epsilon):
    """``log delta(eps)`` by real-axis inversion (``-inf`` where the difference is <= 0)."""
    delta = _delta_fn(comp, direction, jnp.abs(jax.lax.stop_gradient(epsilon)))
    return jnp.minimum(_log_pos(delta(epsilon)), 0.0)


def epsilon_gil_pelaez(comp, direction, log_delta):
    """epsilon with ``delta(eps) = delta`` by real-axis inversion (estimate)."""
    sg = jax.lax.stop_gradient(comp)
    eps0 = jax.lax.stop_gradient(_bounds.epsilon_saddlepoint(sg, direction, log_delta))
    hi = 2.0 * eps0 + 1.0
    delta = _delta_fn(comp, direction, hi)
    target = jnp.exp(log_delta)

    def g(e):
        return delta(e) - target

    return solve_decreasing(g, jnp.zeros_like(hi), hi, x0=eps0)


METHODS = (
    MethodInfo(
        "gil-pelaez",
        certified=False,
        description="real-axis (Gil-Pelaez) inversion; baseline, loses all digits below delta ~ 1e-10",
        log_delta=log_delta_gil_pelaez,
        epsilon=epsilon_gil_pelaez,
    ),
)
