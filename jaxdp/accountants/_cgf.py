"""What several accountants share: ``K, K', K''`` by forward-mode autodiff, the saddle point, the
saddle-point deltas from the first three cumulants, and the tilted characteristic function on a line.

The saddle-point, characteristic-function, real-axis and certified accountants all build on these;
they import them from here, never from each other.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxdp.mechanisms import (
    Composition,
    MixtureMechanism,
    by_direction,
    component_posterior,
    is_stacked,
    mixture_rule,
    scan_stack,
)
from jaxdp.numerics import log_ndtr, log_sub_exp, nufft1, solve_decreasing

LOG_T_LO = math.log(1e-6)
LOG_T_HI = math.log(1e7)
LOG_T_MIN = math.log(1e-12)  # the bracket widens around a starting point outside [LOG_T_LO, LOG_T_HI] ...
LOG_T_MAX = math.log(1e30)  # ... up to these ends
BRACKET_REACH = 12.0  # how far (in log t) past the starting point the bracket reaches
#: Nodes on the contour (static; even).
NUM_NODES = 8192
#: Midpoint nodes per window for the per-step characteristic function of a mixture.
NODES_PER_WINDOW = 2048
#: Half-width (in standard deviations) of each window of that rule.
HALF_WIDTH = 10.0
#: Bandwidth margin of a unit-width Gaussian bump for the midpoint rule (exp(-B^2/2) ~ 1e-18).
_BUMP_BANDWIDTH = 9.0


def k01(comp, direction, t):
    """``(K(t), K'(t))`` (:meth:`~jaxdp.mechanisms.AbstractMechanism.cgf_derivatives`)."""
    return k012(comp, direction, t)[:2]


def k012(comp, direction, t):
    """``(K(t), K'(t), K''(t))``: one traced quadrature per mixture, not one per derivative."""
    return comp.cgf_derivatives(t, direction)


def gaussian_mu2_of(comp):
    return jax.lax.stop_gradient(jnp.maximum(comp.gaussian_mu2(), 1e-300))


def clip_log_t(u):
    return jnp.clip(u, LOG_T_MIN, LOG_T_MAX)


def log_t_bracket(u0):
    """``[lo, hi]`` in ``log t``: the default bracket, widened to reach ``BRACKET_REACH`` past the start."""
    u0 = jax.lax.stop_gradient(u0)
    lo = jnp.clip(jnp.minimum(LOG_T_LO, u0 - BRACKET_REACH), LOG_T_MIN, LOG_T_LO)
    hi = jnp.clip(jnp.maximum(LOG_T_HI, u0 + BRACKET_REACH), LOG_T_HI, LOG_T_MAX)
    return lo, hi


def guess_log_t_for_epsilon(comp, epsilon):
    """Saddle point of the Gaussian pair with the same ``K(1)`` (a starting point)."""
    mu2 = gaussian_mu2_of(comp)
    t = jnp.maximum(epsilon / mu2, 1.0)
    for _ in range(4):  # Newton on mu2 (t + 1/2) - eps - 1/t - 1/(1+t), convex-increasing
        f = mu2 * (t + 0.5) - epsilon - 1.0 / t - 1.0 / (1.0 + t)
        df = mu2 + 1.0 / (t * t) + 1.0 / (1.0 + t) ** 2
        t = jnp.maximum(t - f / df, 0.5 * t)
    return clip_log_t(jnp.log(t))


def guess_log_t_for_delta(comp, log_delta):
    """For the Gaussian pair, t* ~ sqrt(2 log(1/delta)) / mu."""
    mu2 = gaussian_mu2_of(comp)
    return clip_log_t(0.5 * jnp.log(2.0 * jnp.maximum(-log_delta, 1e-3) / mu2))


def saddle_point(comp: Composition, direction: str, epsilon):
    """``t*`` solving ``K'(t) = eps + 1/t + 1/(1+t)`` (differentiable)."""

    def h(u):  # decreasing in u = log t
        t = jnp.exp(u)
        _, k1 = k01(comp, direction, t)
        return -(k1 - epsilon - 1.0 / t - 1.0 / (1.0 + t))

    u0 = guess_log_t_for_epsilon(comp, epsilon)
    lo, hi = log_t_bracket(u0)
    return jnp.exp(solve_decreasing(h, lo, hi, x0=u0))


def log_deltas(k0, k1, k2, t, epsilon):
    """``(log delta_2, log delta_1)`` at ``t`` from ``K, K', K''``."""
    a = k1 - epsilon
    s = jnp.sqrt(k2)

    # log E[exp(-c U) 1{U > 0}], U ~ N(a, k2), at c = t and t + 1 in one call (one traced ``log Phi``)
    t_b = jnp.broadcast_arrays(t, a, k2)[0]
    c = jnp.stack([t_b, t_b + 1.0])
    log_t, log_u = -c * a + 0.5 * c * c * k2 + log_ndtr((a - c * k2) / s)
    log_e = log_sub_exp(log_t, log_u)
    base = k0 - epsilon * t
    log_d2 = base + log_e
    log_d1 = base - 0.5 * jnp.log(2.0 * math.pi * (t * t * (1.0 + t) ** 2 * k2 + t * t + (1.0 + t) ** 2))
    return log_d2, log_d1


def eps_on_curve(comp, direction, t):
    """``eps(t) = K'(t) - 1/t - 1/(1 + t)``: the epsilon whose saddle point is ``t``."""
    _, k1 = k01(comp, direction, t)
    return k1 - 1.0 / t - 1.0 / (1.0 + t)


def log_delta2_on_curve(comp, direction, t):
    """``log delta_2`` at the point ``(t, eps(t))`` of the saddle-point curve."""
    k0, k1, k2 = k012(comp, direction, t)
    return log_deltas(k0, k1, k2, t, k1 - 1.0 / t - 1.0 / (1.0 + t))[0]


class MixtureNodes(NamedTuple):
    ell: jax.Array  # privacy loss at the nodes, centred at its tilted mean
    mean: jax.Array  # the tilted mean
    log_c: jax.Array  # normalised tilted weights
    s_res: jax.Array  # largest s the rule resolves


def mixture_nodes(mech: MixtureMechanism, direction: str, t) -> MixtureNodes:
    log_p, c, sigma = mech.mixture()
    b = c / sigma
    lam, sign = by_direction(direction, (1.0 + t, 1.0), (-t, -1.0))
    rule = mixture_rule(lam, log_p, b, nodes_per_window=NODES_PER_WINDOW, half_width=HALF_WIDTH)
    log_c = lam * rule.log_r + rule.log_w
    log_c = log_c - jax.nn.logsumexp(log_c)
    ell = sign * rule.log_r
    mean = jnp.sum(jnp.exp(log_c) * ell)
    # resolution of the rule for exp(i s ell(z)): node spacing, slope and bump width
    z = rule.z
    h = jax.lax.stop_gradient(jnp.exp(rule.log_w[0] + 0.5 * z[0] * z[0] + 0.5 * math.log(2.0 * math.pi)))
    post = component_posterior(z, log_p, b)
    mean_b = jnp.sum(post * b, axis=-1)
    var_b = jnp.maximum(jnp.sum(post * b * b, axis=-1) - mean_b**2, 0.0)
    significant = log_c > -80.0
    slope = jnp.max(jnp.where(significant, jnp.abs(mean_b), 0.0))
    curvature = 1.0 + jnp.maximum(-lam, 0.0) * jnp.max(jnp.where(significant, var_b, 0.0))
    bandwidth = _BUMP_BANDWIDTH * jnp.sqrt(curvature)
    s_res = (2.0 * math.pi / h - bandwidth) / jnp.maximum(slope, 1e-300)
    s_res = jax.lax.stop_gradient(jnp.maximum(s_res, 0.0))
    return MixtureNodes(ell - mean, mean, log_c, s_res)


#: ``line_nodes``'s entry for a stacked part: its nodes are rebuilt segment by segment in ``composed_log_phi``
STACKED = "stacked"


def line_nodes(comp: Composition, direction: str, t):
    """Per-part nodes (``None`` where the CGF has a closed form, ``STACKED`` for a stack) and the smallest
    ``s_res``."""
    nodes, s_res = [], jnp.inf
    for m, n in zip(comp.mechanisms, comp.counts):
        if not isinstance(m, MixtureMechanism):
            nodes.append(None)
        elif is_stacked(n):
            nodes.append(STACKED)
            s_res = scan_stack(lambda acc, mi, _: jnp.minimum(acc, mixture_nodes(mi, direction, t).s_res), s_res, m, n)
        else:
            nd = mixture_nodes(m, direction, t)
            nodes.append(nd)
            s_res = jnp.minimum(s_res, nd.s_res)
    return nodes, s_res


def composed_log_phi(comp: Composition, direction: str, t, nodes, ds):
    """``sum_i n_i log E_t[exp(i s L_i)]`` at ``s = k ds`` (composition adds the per-step terms)."""
    log_phi = jnp.zeros(NUM_NODES, jnp.complex128)
    for m, n, nd in zip(comp.mechanisms, comp.counts, nodes):
        if is_stacked(n):

            def body(acc, mi, ni, nd=nd):
                ndi = mixture_nodes(mi, direction, t) if nd is STACKED else None
                return acc + ni * tilted_log_phi(mi, direction, t, ndi, ds)

            log_phi = scan_stack(body, log_phi, m, n)
        else:
            log_phi = log_phi + jnp.asarray(n, jnp.float64) * tilted_log_phi(m, direction, t, nd, ds)
    return log_phi


def tilted_log_phi(mech, direction, t, nodes, ds):
    """``log E_t[exp(i s L)]`` at ``s = k ds``, ``k < NUM_NODES`` (tilt ``exp(t L)``)."""
    s = ds * jnp.arange(NUM_NODES, dtype=jnp.float64)
    if nodes is None:  # closed-form CGF for complex arguments
        return mech.cgf(t + 1j * s, direction) - mech.cgf(t, direction)
    phi = nufft1(ds * nodes.ell, jnp.exp(nodes.log_c), NUM_NODES)
    return jnp.log(phi) + 1j * s * nodes.mean
