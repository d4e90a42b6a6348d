"""The proposals a sampler draws one step from: exponential tilts of the step's output law (the mechanism's
:meth:`~jaxdp.mechanisms.AbstractMechanism.output_law`, a ``GaussianMixtureLaw`` or a ``LaplaceLaw``) in the
output ``x``, and tabulated tilts in the privacy loss.

Sampling returns the output; its log density under the proposal is ``theta x - log M(theta)`` over ``P`` for an
exponential tilt, or the tabulated cell's for a table.  The continuous part of a draw is reparameterised
(``x = mean + s z``), so the derivative of a sample in the mechanism's parameters flows through the draw, and the
discrete choice (a mixture component or a side) enters the gradient as a likelihood-ratio term.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxdp.mechanisms import AbstractMechanism, LaplaceLaw
from jaxdp.mechanisms.internal import gauss_mixture_log_density
from jaxdp.numerics import bisect


def supported(mech) -> bool:
    """Has ``mech`` an output law to sample (:meth:`~jaxdp.mechanisms.AbstractMechanism.output_law`)?"""
    return type(mech).output_law is not AbstractMechanism.output_law


def solve_theta(law, target):
    """The tilt whose tilted mean loss is ``target`` (clipped to the allowed range; 0 below the untilted
    mean).  The mean loss increases with ``theta`` under ``"remove"`` and decreases under ``"add"``."""
    lo, hi = law.theta_range()
    sign = 1.0 if isinstance(law, LaplaceLaw) else law.sign
    # g(u) = mean(sign * u) - target increases with u = sign * theta: bisect on u
    a = jnp.zeros_like(target)
    b = jnp.where(sign > 0, hi, -lo) + 0.0 * target

    def g(u):
        return law.tilted_mean_loss(sign * u) - target

    a, b = bisect(lambda m: g(m) < 0, a, b, 80)
    u = jnp.where(g(jnp.zeros_like(target)) >= 0, 0.0, 0.5 * (a + b))
    return jax.lax.stop_gradient(sign * u)


def uniform(key, shape):
    """float64 uniforms on ``[0, 1)`` with 53 random bits, built from two ``uint32`` words by float arithmetic
    (no 64-bit integer operations: the program lowers the same inside a user's ``jit`` with x64 off)."""
    bits = jax.random.bits(key, (2, *shape), jnp.uint32)
    hi = jnp.right_shift(bits[0], jnp.uint32(5)).astype(jnp.float64)  # 27 bits
    lo = jnp.right_shift(bits[1], jnp.uint32(6)).astype(jnp.float64)  # 26 bits
    return (hi * 67108864.0 + lo) * (1.0 / 9007199254740992.0)


def normal(key, shape):
    u = uniform(key, shape)
    return math.sqrt(2.0) * jax.scipy.special.erfinv(2.0 * u - 1.0 + 1.0 / 9007199254740992.0)


def exponential(key, shape):
    return -jnp.log1p(-uniform(key, shape))


class GaussProposal(NamedTuple):
    """A mixture ``sum_j pi_j N(mu_j, s^2)`` held fixed (no derivative flows through it): the tilt
    ``e^{theta x} P(x) / M(theta)`` of ``P`` (``theta = log_m = 0`` for ``P`` itself)."""

    log_pi: jax.Array
    mu: jax.Array
    s: jax.Array
    theta: jax.Array
    log_m: jax.Array


class LaplaceProposal(NamedTuple):
    """The tilt ``e^{theta x} Lap(1, b) / M(theta)``, held fixed."""

    theta: jax.Array
    b: jax.Array

    @property
    def log_m(self):
        return LaplaceLaw(self.b).log_mgf(self.theta)


def log_tilt_ratio(prop, x):
    """``log (dprop / dP)(x) = theta x - log M(theta)`` for an exponential tilt ``prop`` of ``P`` (``x_tilt``):
    exact, and one multiply-add a step instead of two mixture densities."""
    return prop.theta * x - prop.log_m


def _sg(tree):
    return jax.tree.map(jax.lax.stop_gradient, tree)


def untilted(law):
    """``P`` itself as a fixed proposal."""
    if isinstance(law, LaplaceLaw):
        return _sg(LaplaceProposal(jnp.zeros(()), law.b))
    zero = jnp.zeros((), jnp.float64)
    return _sg(GaussProposal(law.log_p, law.c, law.s, zero, zero))


def x_tilt(law, theta):
    """The exponential tilt of ``P`` in the output, ``P_theta(x) ~ e^{theta x} P(x)``."""
    if isinstance(law, LaplaceLaw):
        return _sg(LaplaceProposal(theta, law.b))
    theta = jnp.asarray(theta, jnp.float64)
    log_pi = jax.nn.log_softmax(law.log_p + theta * law.c)
    return _sg(GaussProposal(log_pi, law.c + theta * law.s**2, law.s, theta, law.log_mgf(theta)))


#: equal-probability cells of a tabulated tilt, and the fine grid its CDF is built on
TABLE_CELLS = 2048
_FINE = 16384


class TableProposal(NamedTuple):
    """A tabulated density: ``TABLE_CELLS`` cells of probability ``1/TABLE_CELLS`` each, uniform inside, with
    exponential tails beyond the first and last inner edges (so it is positive on the whole line)."""

    edges: jax.Array  # (TABLE_CELLS - 1,) inner cell edges x_1 < ... < x_{M-1}
    rate_left: jax.Array
    rate_right: jax.Array
    log_width: jax.Array  # (TABLE_CELLS,) log width of each inner cell (entries 0 and M-1 unused)


def loss_tilt(law, t):
    """The privacy-loss tilt ``P_t(x) ~ P(x) e^{t L(x)}`` tabulated by its quantiles: sampled in O(1) by
    inverse CDF (exact for the tabulated density, which is the proposal; the weights use it exactly)."""
    law = _sg(law)
    t = jax.lax.stop_gradient(t)
    lo, hi = law.loss_tilt_window(t)
    dx = (hi - lo) / _FINE
    mid = lo + dx * (jnp.arange(_FINE) + 0.5)
    log_dens = law.log_density(mid) + t * law.loss(mid)
    log_dens = jnp.where(jnp.isfinite(log_dens), log_dens, -jnp.inf)
    mass = jnp.exp(log_dens - jnp.max(log_dens))
    cdf = jnp.concatenate([jnp.zeros(1), jnp.cumsum(mass)])
    cdf = cdf / cdf[-1]
    grid = lo + dx * jnp.arange(_FINE + 1)
    probs = jnp.arange(1, TABLE_CELLS) / TABLE_CELLS
    edges = jnp.interp(probs, cdf, grid)
    edges = edges + 1e-12 * (hi - lo) * jnp.arange(TABLE_CELLS - 1)  # strictly increasing
    # tails continue the neighbouring cell's density: (1/M) rate at the edge
    rate_left = 1.0 / (edges[1] - edges[0])
    rate_right = 1.0 / (edges[-1] - edges[-2])
    widths = jnp.concatenate([jnp.ones(1), edges[1:] - edges[:-1], jnp.ones(1)])
    return _sg(TableProposal(edges, rate_left, rate_right, jnp.log(widths)))


def _table_draw(prop, key, shape):
    m = TABLE_CELLS
    u = uniform(key, shape) * m
    k = jnp.clip(jnp.floor(u).astype(jnp.int32), 0, m - 1)
    r = jnp.clip(u - k, 1e-300, 1.0 - 1e-16)
    inner = (k > 0) & (k < m - 1)
    left = k == 0
    ki = jnp.clip(k, 1, m - 2)
    a = prop.edges[ki - 1]
    b = prop.edges[ki]
    # a tail draw is an exponential distance e past its outer edge (one log for both tails)
    e = -jnp.log(jnp.where(left, r, 1.0 - r))
    rate = jnp.where(left, prop.rate_left, prop.rate_right)
    x_tail = jnp.where(left, prop.edges[0] - e / rate, prop.edges[-1] + e / rate)
    x = jnp.where(inner, a + r * (b - a), x_tail)
    log_g = -math.log(m) + jnp.where(inner, -prop.log_width[k], jnp.log(rate) - e)
    return x, log_g


def proposal_log_density(prop, x):
    if isinstance(prop, LaplaceProposal):
        return prop.theta * x - prop.log_m - jnp.abs(x - 1.0) / prop.b - jnp.log(2.0 * prop.b)
    return gauss_mixture_log_density(prop.log_pi, prop.mu, prop.s, x)


def draw_with_density(prop, key, shape):
    """``(x, log G(x))`` for a tabulated proposal (its density is known from the cell drawn)."""
    return _table_draw(prop, key, shape)


def draw(prop, key, shape, tilted=None, base=None):
    """Outputs drawn from ``prop`` (where the boolean array ``tilted`` is False: from ``base``)."""
    k_choice, k_cont = jax.random.split(key)
    if isinstance(prop, LaplaceProposal):
        theta = prop.theta if tilted is None else jnp.where(tilted, prop.theta, base.theta)
        b = prop.b
        right = uniform(k_choice, shape) < 0.5 * (1.0 + b * theta)
        rate = jnp.where(right, 1.0 / b - theta, 1.0 / b + theta)
        e = exponential(k_cont, shape)
        return 1.0 + jnp.where(right, 1.0, -1.0) * e / rate
    z = normal(k_cont, shape)
    j_count = prop.mu.shape[0]

    def pick(a, b_):
        return a if tilted is None else jnp.where(tilted, a, b_)

    if j_count == 1:
        mean = pick(prop.mu[0], None if base is None else base.mu[0])
    elif j_count == 2:
        logit = pick(prop.log_pi[1] - prop.log_pi[0], None if base is None else base.log_pi[1] - base.log_pi[0])
        one = uniform(k_choice, shape) < jax.nn.sigmoid(logit)
        mean = jnp.where(
            one,
            pick(prop.mu[1], None if base is None else base.mu[1]),
            pick(prop.mu[0], None if base is None else base.mu[0]),
        )
    else:
        logits = prop.log_pi if tilted is None else jnp.where(tilted[..., None], prop.log_pi, base.log_pi)
        cum = jnp.cumsum(jax.nn.softmax(jnp.broadcast_to(logits, (*shape, j_count)), axis=-1), axis=-1)
        u = uniform(k_choice, shape)
        j = jnp.minimum(jnp.sum(cum <= u[..., None], axis=-1), j_count - 1)
        mean = prop.mu[j] if tilted is None else jnp.where(tilted, prop.mu[j], base.mu[j])
    return mean + prop.s * z
