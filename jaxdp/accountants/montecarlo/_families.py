"""Per-step output laws under ``P``, their exponential tilts in the output ``x``, and the privacy loss.

Every supported step is one of two *families*:

* ``GaussianFamily``: ``P`` is a mixture of Gaussians ``sum_j p_j N(c_j, s^2)`` (the Gaussian
  mechanism, mixtures of Gaussians and the Poisson-subsampled Gaussian; under ``"add"`` ``P`` is
  ``N(0, s^2)`` and the mixture sits in ``Q``).  The loss is ``sign * log R(x)`` with
  ``R(x) = sum_j r_j exp((c_j x - c_j^2 / 2) / s^2)``.  Its tilt ``P_theta(x) ~ e^{theta x} P(x)``
  is again such a mixture: means ``c_j + theta s^2``, weights ``p_j e^{theta c_j}``,
  ``log M(theta) = logsumexp(log p_j + theta c_j) + theta^2 s^2 / 2``.
* ``LaplaceFamily``: ``P = Lap(1, b)``, loss ``(|x| - |x - 1|) / b``; its tilt (``|theta| < 1/b``)
  puts ``x`` right of 1 with probability ``(1 + b theta) / 2`` at an ``Exp(1/b - theta)`` distance
  and left of it at an ``Exp(1/b + theta)`` distance; ``log M(theta) = theta - log(1 - b^2 theta^2)``.

Sampling returns the output, its loss, ``theta x - log M(theta)`` (the log of the tilted density over
``P``) and the log-probability of the discrete choice made (a mixture component or a side), whose
derivative is the likelihood-ratio term of the gradient estimator (the continuous part is
reparameterised: ``x = mean + s z``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.mechanisms import Gaussian, Laplace, MixtureMechanism
from jaxdp.numerics import bisect, logsumexp

# Gauss-Hermite rule for E[f(m + s Z)] (the tilted mean of the loss; the loss is smooth)
_GH_X, _GH_W = np.polynomial.hermite.hermgauss(80)
_GH_X = _GH_X * math.sqrt(2.0)
_GH_W = _GH_W / math.sqrt(math.pi)


class GaussianFamily(NamedTuple):
    log_p: jax.Array  # (J,) log weights of P's components
    c: jax.Array  # (J,) their means
    log_r: jax.Array  # (K,) log weights of R's components
    rc: jax.Array  # (K,) their sensitivities
    s: jax.Array  # noise scale
    sign: float  # +1 remove, -1 add


class LaplaceFamily(NamedTuple):
    b: jax.Array


def supported(mech) -> bool:
    return isinstance(mech, (Gaussian, Laplace, MixtureMechanism))


def family(mech, direction: str):
    """The family of one step of ``mech`` under ``direction`` (``"remove"`` or ``"add"``)."""
    if isinstance(mech, Laplace):
        return LaplaceFamily(jnp.asarray(mech.noise_multiplier, jnp.float64))
    if isinstance(mech, Gaussian):
        s = jnp.asarray(mech.noise_multiplier, jnp.float64)
        log_p, c = jnp.zeros(1), jnp.ones(1)
    elif isinstance(mech, MixtureMechanism):
        log_p, c, s = mech.mixture()
    else:  # pragma: no cover - guarded by supported()
        raise TypeError(type(mech).__name__)
    if direction == "remove":
        return GaussianFamily(log_p, c, log_p, c, s, 1.0)
    return GaussianFamily(jnp.zeros(1), jnp.zeros(1), log_p, c, s, -1.0)


def loss(fam, x):
    if isinstance(fam, LaplaceFamily):
        return (jnp.abs(x) - jnp.abs(x - 1.0)) / fam.b
    s2 = fam.s * fam.s
    k = fam.rc.shape[0]
    if k == 1:
        log_r = fam.log_r[0] + (fam.rc[0] * x - 0.5 * fam.rc[0] ** 2) / s2
    elif k == 2:
        a = fam.log_r[0] + (fam.rc[0] * x - 0.5 * fam.rc[0] ** 2) / s2
        b = fam.log_r[1] + (fam.rc[1] * x - 0.5 * fam.rc[1] ** 2) / s2
        log_r = jnp.logaddexp(a, b)
    else:
        terms = fam.log_r + (fam.rc * x[..., None] - 0.5 * fam.rc**2) / s2
        log_r = logsumexp(terms, axis=-1)
    return fam.sign * log_r


def loss_and_log_density(fam, x):
    """``(loss(fam, x), log_density(fam, x))`` sharing one evaluation of ``log R(x)``.

    Under ``"remove"`` ``P(x) = N(x; 0, s^2) R(x) / sum_j p_j`` (``P``'s components are ``R``'s), under
    ``"add"`` ``P = N(0, s^2)``: the log density is the Gaussian's plus the loss (remove) or the Gaussian's
    alone (add), so the hot loop pays for one log-sum-exp a step instead of two.
    """
    ell = loss(fam, x)
    if isinstance(fam, LaplaceFamily):
        return ell, log_density(fam, x)
    log_phi = -0.5 * (x / fam.s) ** 2 - jnp.log(fam.s) - 0.5 * math.log(2.0 * math.pi)
    if fam.sign > 0:
        return ell, log_phi + ell - logsumexp(fam.log_p)
    return ell, log_phi


def log_mgf(fam, theta):
    """``log E_P[e^{theta x}]``."""
    if isinstance(fam, LaplaceFamily):
        bt = fam.b * theta
        return theta - jnp.log1p(-bt * bt)
    return logsumexp(fam.log_p + theta * fam.c) + 0.5 * theta * theta * fam.s * fam.s


def theta_range(fam):
    """The open interval of tilts with a finite moment generating function (a safe part of it)."""
    if isinstance(fam, LaplaceFamily):
        return -0.95 / fam.b, 0.95 / fam.b
    big = 60.0 / (fam.s * fam.s) + 60.0 / fam.s
    return -big, big


def tilted_mean_loss(fam, theta):
    """``E[L]`` under the tilted law ``P_theta``."""
    if isinstance(fam, LaplaceFamily):
        b = fam.b
        p_right = 0.5 * (1.0 + b * theta)
        r = 1.0 / b + theta
        em = jnp.exp(-r)
        left = ((1.0 - em) - 2.0 * (1.0 - em * (1.0 + r)) / r - em) / b
        return p_right / b + (1.0 - p_right) * left
    w = jax.nn.softmax(fam.log_p + theta * fam.c)
    means = fam.c + theta * fam.s * fam.s
    x = means[:, None] + fam.s * _GH_X[None, :]
    return jnp.sum(w[:, None] * _GH_W[None, :] * loss(fam, x))


def solve_theta(fam, target):
    """The tilt whose tilted mean loss is ``target`` (clipped to the allowed range; 0 below the untilted
    mean).  The mean loss increases with ``theta`` under ``"remove"`` and decreases under ``"add"``."""
    lo, hi = theta_range(fam)
    sign = 1.0 if isinstance(fam, LaplaceFamily) else fam.sign
    # g(u) = mean(sign * u) - target increases with u = sign * theta: bisect on u
    a = jnp.zeros_like(target)
    b = jnp.where(sign > 0, hi, -lo) + 0.0 * target

    def g(u):
        return tilted_mean_loss(fam, sign * u) - target

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
        bt = self.b * self.theta
        return self.theta - jnp.log1p(-bt * bt)


def log_tilt_ratio(prop, x):
    """``log (dprop / dP)(x) = theta x - log M(theta)`` for an exponential tilt ``prop`` of ``P`` (``x_tilt``):
    exact, and one multiply-add a step instead of two mixture densities."""
    return prop.theta * x - prop.log_m


def _sg(tree):
    return jax.tree.map(jax.lax.stop_gradient, tree)


def untilted(fam):
    """``P`` itself as a fixed proposal."""
    if isinstance(fam, LaplaceFamily):
        return _sg(LaplaceProposal(jnp.zeros(()), fam.b))
    zero = jnp.zeros((), jnp.float64)
    return _sg(GaussProposal(fam.log_p, fam.c, fam.s, zero, zero))


def x_tilt(fam, theta):
    """The exponential tilt of ``P`` in the output, ``P_theta(x) ~ e^{theta x} P(x)``."""
    if isinstance(fam, LaplaceFamily):
        return _sg(LaplaceProposal(theta, fam.b))
    theta = jnp.asarray(theta, jnp.float64)
    log_pi = jax.nn.log_softmax(fam.log_p + theta * fam.c)
    return _sg(GaussProposal(log_pi, fam.c + theta * fam.s**2, fam.s, theta, log_mgf(fam, theta)))


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


def loss_tilt(fam, t):
    """The privacy-loss tilt ``P_t(x) ~ P(x) e^{t L(x)}`` tabulated by its quantiles: sampled in O(1) by
    inverse CDF (exact for the tabulated density, which is the proposal; the weights use it exactly)."""
    fam = _sg(fam)
    t = jax.lax.stop_gradient(t)
    if isinstance(fam, LaplaceFamily):
        lo, hi = 1.0 - 45.0 * fam.b, 1.0 + 45.0 * fam.b
    else:
        cmax = jnp.max(jnp.abs(jnp.concatenate([fam.c, fam.rc])))
        lo = -(1.0 + t) * cmax - 16.0 * fam.s
        hi = (1.0 + t) * cmax + 16.0 * fam.s
    dx = (hi - lo) / _FINE
    mid = lo + dx * (jnp.arange(_FINE) + 0.5)
    log_dens = log_density(fam, mid) + t * loss(fam, mid)
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


def _gauss_log_density(log_w, mu, s, x):
    """``log sum_j w_j N(x; mu_j, s^2)`` (``log_w`` normalised)."""
    const = -jnp.log(s) - 0.5 * math.log(2.0 * math.pi)
    j = mu.shape[0]
    if j == 1:
        return log_w[0] - 0.5 * ((x - mu[0]) / s) ** 2 + const
    if j == 2:
        return jnp.logaddexp(log_w[0] - 0.5 * ((x - mu[0]) / s) ** 2, log_w[1] - 0.5 * ((x - mu[1]) / s) ** 2) + const
    return logsumexp(log_w - 0.5 * ((x[..., None] - mu) / s) ** 2, axis=-1) + const


def log_density(fam, x):
    """``log P(x)`` (live parameters: its derivative is the likelihood-ratio term)."""
    if isinstance(fam, LaplaceFamily):
        return -jnp.abs(x - 1.0) / fam.b - jnp.log(2.0 * fam.b)
    return _gauss_log_density(jax.nn.log_softmax(fam.log_p), fam.c, fam.s, x)


def proposal_log_density(prop, x):
    if isinstance(prop, LaplaceProposal):
        bt = prop.b * prop.theta
        log_m = prop.theta - jnp.log1p(-bt * bt)
        return prop.theta * x - log_m - jnp.abs(x - 1.0) / prop.b - jnp.log(2.0 * prop.b)
    return _gauss_log_density(prop.log_pi, prop.mu, prop.s, x)


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
