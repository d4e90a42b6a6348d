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
from jax.scipy.special import log_ndtr as _jax_log_ndtr

__all__ = [
    "LOG_2PI",
    "UNIT_ROUNDOFF",
    "argmax",
    "argmin",
    "float64_scope",
    "log1mexp",
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


def log_ndtr(x):
    """``log Phi(x)`` accurate to ~1e-16 relative for all float64 ``x``.

    JAX's default asymptotic series (order 3) used below ``x = -20`` is only good to
    ~1e-9 relative near the switch; order 12 is good to machine precision there.
    """
    return _jax_log_ndtr(x, series_order=12)


def log1mexp(x):
    """``log(1 - exp(x))`` for ``x <= 0``, accurate everywhere (Mächler 2012).

    Returns ``-inf`` at ``x == 0`` and NaN for ``x > 0``.
    """
    x = jnp.asarray(x)
    near = x > -math.log(2.0)
    # Double-where so that neither branch produces NaN gradients.
    x_near = jnp.where(near, x, -1.0)
    x_far = jnp.where(near, -1.0, x)
    return jnp.where(near, jnp.log(-jnp.expm1(x_near)), jnp.log1p(-jnp.exp(x_far)))


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
