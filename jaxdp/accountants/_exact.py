"""Closed-form privacy curve of composed Gaussian mechanisms (Balle & Wang 2018), without cancellation.

A composition of Gaussian mechanisms with noise multipliers ``s_i`` applied
``n_i`` times is exactly the Gaussian mechanism with ``mu^2 = sum_i n_i / s_i^2``
(Dong, Roth & Su 2019), and, with ``h = mu / 2``, ``u = eps / mu``, ``a = h - u``,

    delta(eps) = Phi(a) - e^eps Phi(a - mu) = phi(a) (R(u - h) - R(u + h)),

``R(x) = Phi(-x) / phi(x)`` the Mills ratio (``e^eps phi(a - mu) = phi(a)``).  The two
terms of the first form agree to ~``log10(u / mu)`` digits for a small ``mu`` (a ``log_sub_exp`` of
two ``log_ndtr`` loses them: relative errors far above rounding, and delta = 0 deep in the tail, where the
solver starts, hence a NaN or infinite epsilon for a large ``sigma``).  Here no digits are lost:

* ``h <= 0.1 max(1, u)`` (narrow): ``R(u - h) - R(u + h) = 2 sum_{k odd} J_k(u) h^k / k!``
  with ``J_k(u) = int_0^inf t^k e^{-ut - t^2/2} dt = (-1)^k R^(k)(u)``, a sum of positive
  terms; the ratios ``J_k / J_{k-1}`` come from the backward recurrence (Laplace's
  continued fraction ``c_k = k / (u + c_{k+1})``) for ``u >= 2``, from the forward
  recurrence ``J_{k+1} = k J_{k-1} - u J_k`` (stable there) below.
* otherwise (wide): ``log delta = log Phi(a) + log(1 - R(u + h) / R(u - h))``, the ratio at
  most ``0.9``, with ``log R`` from the continued fraction for ``x >= 2`` (no ``x^2 / 2`` to
  cancel) and ``log_ndtr(-x) + x^2 / 2 + log sqrt(2 pi)`` below.

``log delta`` has the analytic derivatives ``d/dmu = 1 / D``, ``d/deps = -R(u + h) / D``
(``D = R(u - h) - R(u + h)``), given by a custom JVP.  epsilon(delta) solves
``log delta(mu u) = log delta`` for ``u`` (relative tolerance in ``u``, so a tiny epsilon
is solved as accurately as a large one) with the safeguarded Newton iteration of
:mod:`jaxdp.numerics._solvers` (implicit gradients).

Derivation and guarantees: ``docs/accountants/exact.md``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.accountants._registry import MethodInfo
from jaxdp.mechanisms import Composition, Gaussian
from jaxdp.numerics import bracketed_newton, log1mexp, log_ndtr, solve_decreasing

__all__ = ["epsilon_gaussian", "gaussian_mu", "log_delta_gaussian"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_SWITCH = 2.0  # continued fraction (backward recurrence) for x >= 2, log_ndtr / forward recurrence below
_DEPTH = 100  # continued-fraction depth: relative error < 2e-16 for x >= 2 (started at its fixed point)
_NARROW = 0.1  # the series where h <= _NARROW max(1, u): its terms fall by (h / u)^2 <= 1e-2 or faster
_ORDER = 17  # last odd k of the series: first omitted term < 1e-18 of the sum
_INV_ODD_FACTORIAL = np.array([1.0 / math.factorial(k) for k in range(1, _ORDER + 1, 2)])


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


def _curve(mu, epsilon):
    """``(log delta, log D, log R(u + h))`` (see the module docstring) for arrays of one shape."""
    h = 0.5 * mu
    u = epsilon / mu
    x = jnp.stack([u + h, u - h, u])
    log_tail = log_ndtr(-x)  # log Phi(-x); log Phi(a) is the second
    log_r_small = log_tail + 0.5 * x * x + _HALF_LOG_2PI
    # Laplace's continued fraction R(x) = 1 / (x + c_1), c_k = k / (x + c_{k+1}), from the tail's fixed point
    xc = jnp.maximum(x, _SWITCH)
    n = float(_DEPTH)
    c_tail = (n + 1.0) / (jnp.sqrt(n + 1.0 + 0.25 * xc * xc) + 0.5 * xc)

    def backward(c, k):
        c = k / (xc + c)
        return c, c

    _, cs = jax.lax.scan(backward, c_tail, jnp.arange(n, 0.0, -1.0))  # cs[-k] = c_k
    log_r = jnp.where(x < _SWITCH, log_r_small, -jnp.log(xc + cs[-1]))

    # wide: log Phi(a) + log(1 - R(u + h) / R(u - h))
    narrow = h <= _NARROW * jnp.maximum(1.0, u)
    d = jnp.where(narrow, -1.0, jnp.minimum(log_r[0] - log_r[1], 0.0))
    log_gap = log1mexp(d)
    wide_delta, wide_d = log_tail[1] + log_gap, log_r[1] + log_gap

    # narrow: D = 2 h R(u) sum_j P_{2j+1} h^{2j} / (2j+1)!, P_k = J_k / J_0 > 0
    up = u >= _SWITCH
    p1 = jnp.where(up, cs[-1, 2], jnp.exp(-log_r[2]) - u)

    def forward(carry, kc):
        p_prev, p = carry
        k, c_next = kc
        p_next = jnp.where(up, c_next * p, k * p_prev - u * p)
        return (p, p_next), p_next

    ks = jnp.arange(1.0, float(_ORDER))
    _, ps = jax.lax.scan(forward, (jnp.ones_like(u), p1), (ks, cs[-2 : -_ORDER - 1 : -1, 2]))
    p_odd = jnp.concatenate([p1[None], ps[1::2]])
    h2 = jnp.where(narrow, h * h, 0.0)
    powers = h2 ** jnp.arange(float(len(_INV_ODD_FACTORIAL))).reshape((-1,) + (1,) * h2.ndim)
    inv_fact = jnp.asarray(_INV_ODD_FACTORIAL).reshape(powers.shape[:1] + (1,) * h2.ndim)
    narrow_d = jnp.log(2.0 * h) + log_r[2] + jnp.log(jnp.sum(p_odd * powers * inv_fact, axis=0))
    a = h - u
    narrow_delta = -0.5 * a * a - _HALF_LOG_2PI + narrow_d

    return jnp.where(narrow, narrow_delta, wide_delta), jnp.where(narrow, narrow_d, wide_d), log_r[0]


def log_delta_gaussian(mu, epsilon):
    """``log delta(eps)`` of the Gaussian mechanism with parameter ``mu``: delta to a few ulp times its
    condition number in ``(mu, eps)`` (``docs/accountants/exact.md``), with analytic derivatives."""
    mu, epsilon = (jnp.asarray(v) for v in (mu, epsilon))
    dtype = jnp.promote_types(jnp.result_type(mu, epsilon), jax.dtypes.canonicalize_dtype(jnp.float64))  # in scope: f64
    return _log_delta(*jnp.broadcast_arrays(mu.astype(dtype), epsilon.astype(dtype)))


@jax.custom_jvp
def _log_delta(mu, epsilon):
    return _curve(mu, epsilon)[0]


@_log_delta.defjvp
def _log_delta_jvp(primals, tangents):
    mu, epsilon = primals
    mu_dot, epsilon_dot = tangents
    log_delta, log_d, log_r_plus = _curve(mu, epsilon)
    return log_delta, jnp.exp(-log_d) * mu_dot - jnp.exp(log_r_plus - log_d) * epsilon_dot


def epsilon_gaussian(mu, log_delta):
    """Smallest ``eps >= 0`` with ``delta(eps) <= exp(log_delta)``, solved for ``u = eps / mu``."""
    mu, log_delta = jnp.broadcast_arrays(mu, log_delta)
    zero = jnp.zeros_like(mu)

    def f(u):
        return log_delta_gaussian(mu, mu * u) - log_delta

    at_zero = f(zero) <= 0  # delta(0) <= delta: eps = 0 (an empty bracket: no iterations)
    neg_log = jnp.maximum(-log_delta, 0.0)
    hi = jnp.where(at_zero, 0.0, 0.5 * mu + jnp.sqrt(2.0 * neg_log) + 1.0)  # delta(mu hi) < Phi(h - hi) < delta
    # start: delta ~ Phi(h - u) for a large mu, ~ mu phi(u) / u^2 for a small one (4-5 Newton steps)
    u0 = 0.5 * mu + jnp.sqrt(2.0 * jnp.maximum(neg_log + jnp.minimum(jnp.log(mu), 0.0) - 1.0, 0.0))

    def newton(start):
        return bracketed_newton(f, zero, hi, start, xtol=1e-14)[0]

    u = solve_decreasing(f, zero, hi, x0=u0, solver=newton)
    return jnp.where(at_zero, 0.0, mu * u)


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
