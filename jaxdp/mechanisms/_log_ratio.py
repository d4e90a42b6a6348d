"""The log likelihood ratio of a Gaussian mixture against its zero component, its slope and its inverse.

``M(x) = log sum_i p_i exp((c_i x - c_i^2 / 2) / s^2)`` is the log ratio ``log P(x) / Q(x)`` of the
mixture ``P = sum_i p_i N(c_i, s^2)`` against ``Q = N(0, s^2)`` (the privacy loss of the remove
direction, its negative for add).  Every place that evaluates it -- the quadrature rules, the
mechanisms' privacy loss, the certified lattice -- calls these.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdp.numerics import UNIT_ROUNDOFF, log1mexp

__all__ = [
    "LOG_ZERO",
    "NEWTON_MAX_ITER",
    "UNROLL",
    "X_FAR",
    "component_posterior",
    "inverse_log_ratio",
    "log_ratio",
    "mixture_log_ratio",
    "scaled_exps",
]

LOG_ZERO = -1e5  # "log 0" that keeps gradients finite (exp underflows to exactly 0)
X_FAR = 40.0  # outputs beyond 40 noise deviations carry P-mass < 1e-300
NEWTON_MAX_ITER = 60
UNROLL = 24  # mixtures with at most this many components are summed in one fused loop
_START_GRID = 1024  # coarse grid of Newton starting points for the inverse of the log ratio
_U = UNIT_ROUNDOFF
_NEG = LOG_ZERO
_X_FAR = X_FAR


def scaled_exps(es):
    """``(r, [exp(e - r) for e in es])`` with ``r`` the elementwise largest of ``es`` (no gradient; 0 where none is
    finite): the shared step of the unrolled sums over mixture components."""
    r = es[0]
    for e in es[1:]:
        r = jnp.maximum(r, e)
    r = jax.lax.stop_gradient(jnp.where(jnp.isfinite(r), r, 0.0))
    return r, [jnp.exp(e - r) for e in es]


def mixture_log_ratio(x, log_p, c, s2, slope=False):
    """``log sum_i exp(e_i)``, ``e_i = log p_i + (c_i x - c_i^2 / 2) / s^2``; with ``slope`` its derivative too.

    Unrolled over the components for small mixtures and many points (one fused loop over ``x``), else a
    reduction over a trailing axis.
    """
    k = log_p.shape[0]
    # (not for a few points: XLA fuses an unrolled scalar chain into every large loop that uses it)
    if k <= UNROLL and jnp.size(x) > _START_GRID:
        r, ws = scaled_exps([log_p[i] + (c[i] * x - 0.5 * c[i] * c[i]) / s2 for i in range(k)])
        total = sum(ws)
        lse = r + jnp.log(total)
        if not slope:
            return lse
        return lse, sum(wi * c[i] for i, wi in enumerate(ws)) / (total * s2)
    e = log_p + (c * x[..., None] - 0.5 * c * c) / s2
    lse = jax.nn.logsumexp(e, axis=-1)
    if not slope:
        return lse
    return lse, jnp.sum(jnp.exp(e - lse[..., None]) * c, axis=-1) / s2


def log_ratio(x, log_p, c, s):
    """``M(x) = log sum_i p_i exp((c_i x - c_i^2 / 2) / s^2)`` (vectorised over x)."""
    return mixture_log_ratio(x, log_p, c, s * s)


def inverse_log_ratio(m, log_p, c, s):
    """``x`` with ``M(x) = m`` (``-inf`` where ``m <= log p_0``), Newton from the right.

    With ``p_0`` the mass of the ``c = 0`` components, solves
    ``log S(x) = log(e^m - p_0)`` for ``S`` the sum over ``c > 0``: convex and
    increasing, so Newton started where ``S`` already exceeds the target (the
    largest single term alone does) decreases monotonically to the root.
    Implicitly differentiated (one Newton step with gradients at the root).
    """
    pos = c > 0
    log_p = jnp.maximum(log_p, _NEG)
    log_p0 = jax.nn.logsumexp(jnp.where(pos, _NEG, log_p))
    log_pp = jnp.where(pos, log_p, _NEG)
    above = m > log_p0 + 1e-12
    m_safe = jnp.where(above, m, log_p0 + 1.0)
    tau = jnp.where(above, m_safe + log1mexp(jnp.minimum(log_p0 - m_safe, 0.0)), 0.0)
    c_safe = jnp.where(pos, c, 1.0)
    s2 = s * s

    def newton_step(x, tau, log_pp, c, s2):
        lse, slope = mixture_log_ratio(x, log_pp, c, s2, slope=True)
        return (lse - tau) / slope, slope

    usable = pos & (log_p > _NEG)
    starts = jnp.where(usable, (s2 * (tau[..., None] - log_p) + 0.5 * c * c) / c_safe, jnp.inf)
    x0 = jnp.min(starts, axis=-1)
    # a closer start, still right of the root: one Newton step from the first point of a coarse
    # grid where log S already exceeds the target (the tangent of a convex function lies below it)
    xg = jnp.linspace(-_X_FAR * s, jnp.max(c) + _X_FAR * s, _START_GRID)
    eg = log_pp + (c * xg[:, None] - 0.5 * c * c) / s2
    lg = jax.nn.logsumexp(eg, axis=-1)
    slope_g = jnp.sum(jnp.exp(eg - lg[:, None]) * c, axis=-1) / s2
    j = jnp.clip(jnp.searchsorted(lg, tau), 0, _START_GRID - 1)
    x_t = xg[j] - (lg[j] - tau) / slope_g[j]
    x0 = jnp.where((lg[j] >= tau) & jnp.isfinite(x_t), jnp.minimum(x0, x_t), x0)
    x0 = jax.lax.stop_gradient(x0)
    consts = jax.lax.stop_gradient((tau, log_pp, c, s2))

    def cond(state):
        i, _, step = state
        return (i < NEWTON_MAX_ITER) & (step > 0)

    def body(state):
        i, x, _ = state
        dx, slope = newton_step(x, *consts)
        # converged: the step is within the rounding of x and of the residual (|lse| ~ |tau|)
        noise = 4 * _U * (1.0 + jnp.abs(x)) + 8 * _U * (2.0 + jnp.abs(consts[0])) / slope
        dx = jnp.where(jnp.abs(dx) <= noise, 0.0, dx)
        return i + 1, x - dx, jnp.max(jnp.abs(dx))

    _, x_star, _ = jax.lax.while_loop(cond, body, (0, x0, jnp.float64(1.0)))
    x_star = jax.lax.stop_gradient(x_star)
    # one Newton step with gradients at the root: the implicit derivative
    step, _ = newton_step(x_star, tau, log_pp, c, s2)
    x = x_star - step + jax.lax.stop_gradient(step)
    return jax.lax.optimization_barrier(jnp.where(above, x, -jnp.inf))


def component_posterior(z, log_p, b):
    """Weights ``p_j exp(b_j z - b_j^2/2)`` normalised over the components (last axis; ``z`` broadcast)."""
    return jax.nn.softmax(log_p + b * jnp.asarray(z)[..., None] - 0.5 * b * b, axis=-1)
