"""Log-space numerics and the float64 guard.

Every public accountant runs inside :func:`float64_scope`, which turns on JAX's
64-bit mode for the duration of the call (``jax.enable_x64(True)``) whatever the
user's global ``jax_enable_x64`` setting is, and casts every floating input to
float64.  Results are therefore float64 arrays.  (Inside a user's ``jax.jit``
traced with x64 disabled, the *inputs* that arrive as tracers are already
float32; the computation itself is still carried out in float64.)
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "LOG_2PI",
    "UNIT_ROUNDOFF",
    "argmax",
    "argmin",
    "float64_scope",
    "log1mexp",
    "log1p",
    "log_ndtr",
    "log_sub_exp",
    "logsumexp",
    "nan_to",
    "to_f64",
]

LOG_2PI = math.log(2.0 * math.pi)
UNIT_ROUNDOFF = 2.0**-53  # float64


try:  # JAX >= 0.7
    _enable_x64 = jax.enable_x64
except AttributeError:  # pragma: no cover - older JAX
    from jax.experimental import enable_x64 as _enable_x64


def float64_scope(fn):
    """Decorator: run ``fn`` with JAX 64-bit mode enabled."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _enable_x64(True):
            return fn(*args, **kwargs)

    return wrapper


def to_f64(tree):
    """Casts every leaf of a pytree to a float64 array (call inside the scope)."""
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.float64), tree)


def log1p(x):
    """``log(1 + x)`` to a few ulp for every ``x > -1``.

    XLA:CPU's ``log1p`` in jaxlib 0.10 is up to 240 ulp off on ``-0.4142 < x < -0.355`` (not in jaxlib 0.12).  There
    ``1 + x``, near 0.6, is exact to half its ulp, and its ``log`` is as accurate as ``log1p`` elsewhere.
    """
    x = jnp.asarray(x)
    off = (x > -0.42) & (x < -0.35)
    return jnp.where(off, jnp.log(1.0 + x), jnp.log1p(x))


#: below this ``log Phi`` comes from its asymptotic series (six terms: 3e-17 relative to ``Phi`` at -35), above
#: from ``erfc`` (``Phi(-35) ~ 1e-268``, far from underflow)
_NDTR_SERIES_BELOW = -35.0
#: ``(-1)^k (2k - 1)!!``, ``k = 0..6``: ``Phi(x) = phi(x) / |x| sum_k c_k x^{-2k}`` as ``x -> -inf``
_NDTR_SERIES = tuple((-1) ** k * math.prod(range(1, 2 * k, 2)) for k in range(7))


def _ndtr_series(x):
    """``(x clamped into the series' range, sum_k c_k x^{-2k})``."""
    xs = jnp.minimum(x, _NDTR_SERIES_BELOW)
    # (the terms as one power of a stacked axis: fewer ops than Horner's rule)
    powers = (1.0 / (xs * xs))[..., None] ** np.arange(len(_NDTR_SERIES), dtype=np.float64)
    return xs, jnp.sum(powers * np.asarray(_NDTR_SERIES, np.float64), axis=-1)


@jax.custom_jvp
def log_ndtr(x):
    """``log Phi(x)`` to a few ulp of ``1 + |log Phi(x)|`` for all float64 ``x`` (checked against mpmath in
    ``tests/test_logspace.py``).

    One ``erfc`` of ``|x| / sqrt 2`` (``Phi(x)`` or ``1 - Phi(x)``, relative error ``~ x^2`` ulp: the ``u Z^2`` the
    certified lattice charges) and a six-term asymptotic series below -35: a smaller program than JAX's
    ``log_ndtr(series_order=12)`` (two ``ndtr``, a twelve-term series), and quicker to compile.
    """
    x = jnp.asarray(x)
    h = 0.5 * jax.lax.erfc(jnp.abs(x) * math.sqrt(0.5))  # Phi(-|x|) (below the switch: replaced)
    mid = jnp.where(x < 0, jnp.log(h), log1p(-h))
    xs, p = _ndtr_series(x)
    low = -0.5 * xs * xs - jnp.log(-xs) - 0.5 * LOG_2PI + jnp.log(p)
    return jnp.where(x < _NDTR_SERIES_BELOW, low, mid)


@log_ndtr.defjvp
def _log_ndtr_jvp(primals, tangents):
    # phi / Phi: below the series' switch |x| / p exactly (no cancellation of -x^2/2 against log Phi); ``ans`` from
    # log_ndtr itself, so that a second derivative goes through this rule too (through the erfc it loses digits)
    (x,), (t,) = primals, tangents
    ans = log_ndtr(x)
    xs, p = _ndtr_series(x)
    slope = jnp.where(x < _NDTR_SERIES_BELOW, -xs / p, jnp.exp(-0.5 * x * x - 0.5 * LOG_2PI - ans))
    return ans, t * slope


def log1mexp(x):
    """``log(1 - exp(x))`` for ``x <= 0``, accurate everywhere (Mächler 2012).

    Returns ``-inf`` at ``x == 0`` and NaN for ``x > 0``.
    """
    x = jnp.asarray(x)
    near = x > -math.log(2.0)
    # Double-where so that neither branch produces NaN gradients.
    x_near = jnp.where(near, x, -1.0)
    x_far = jnp.where(near, -1.0, x)
    return jnp.where(near, jnp.log(-jnp.expm1(x_near)), log1p(-jnp.exp(x_far)))


def log_sub_exp(a, b):
    """``log(exp(a) - exp(b))`` for ``a >= b``; ``-inf`` when ``a == b``."""
    a = jnp.asarray(a)
    b = jnp.asarray(b)
    diff = b - a
    finite_a = jnp.isfinite(a)
    empty = diff >= 0  # the difference is zero: -inf, with a zero (not NaN) derivative
    safe = jnp.where(finite_a & ~empty, diff, -1.0)
    return jnp.where(finite_a, jnp.where(empty, -jnp.inf, a + log1mexp(safe)), a)


def logsumexp(x, axis=-1):
    """``log(sum(exp(x)))`` along ``axis`` for real or complex ``x``.

    For complex input the result is the principal branch shifted by the largest
    real part, which is what the complex cumulant generating functions need.
    """
    x = jnp.asarray(x)
    if not jnp.iscomplexobj(x):
        return jax.nn.logsumexp(x, axis=axis)
    m = jax.lax.stop_gradient(jnp.max(x.real, axis=axis, keepdims=True))
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    s = jnp.sum(jnp.exp(x - m), axis=axis)
    return jnp.log(s) + jnp.squeeze(m, axis=axis)


def nan_to(x, value):
    """``x`` where it is a number, ``value`` where it is NaN (a bound that could not be evaluated)."""
    return jnp.where(jnp.isnan(x), value, x)


def argmax(x, axis: int = -1):
    """``jnp.argmax`` (first index of the largest; a NaN counts as the largest), int32.

    ``jnp.argmax``'s lowering builds its reduction's initial value in the dtype
    that JAX's x64 flag allows *when the program is lowered*; a float64 operand
    recorded inside :func:`float64_scope` but lowered by a user's ``jax.jit``
    with x64 off then fails to compile.  This version lowers to plain
    reductions, which carry their operand's dtype.
    """
    x = jnp.asarray(x)
    axis = axis % max(x.ndim, 1)
    m = jnp.max(x, axis=axis, keepdims=True)
    hit = (x == m) | (jnp.isnan(x) & jnp.isnan(m)) if jnp.issubdtype(x.dtype, jnp.inexact) else x == m
    idx = jax.lax.broadcasted_iota(jnp.int32, x.shape, axis)
    return jnp.min(jnp.where(hit, idx, x.shape[axis]), axis=axis)


def argmin(x, axis: int = -1):
    """``jnp.argmin`` (first index of the smallest; a NaN counts as the smallest), int32; see :func:`argmax`."""
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.bool_):
        return argmax(~x, axis)
    return argmax(-x, axis)
