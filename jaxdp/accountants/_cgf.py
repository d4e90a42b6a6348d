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

from jaxdp.mechanisms import Composition, MixtureMechanism, by_direction
from jaxdp.mechanisms.internal import component_posterior, is_stacked, mixture_rule, scan_stack
from jaxdp.numerics import (
    bisect,
    log_ndtr,
    log_sub_exp,
    nufft1,
    safeguarded_newton,
    solve_decreasing,
    sparse_cond,
    traced_once,
    zeros_of,
)

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


def solve_saddle_point(k12, epsilon, u0, lo, hi):
    """``log t*`` with ``K'(t*) = eps + 1/t* + 1/(1+t*)``: THE saddle-point iteration of the library (every tilt of a
    fixed epsilon is solved here).  ``k12(t) -> (K'(t), K''(t))`` is the composition's (a :class:`Composition`'s in
    :func:`saddle_point`, Monte Carlo's parts' in its sampler).  Newton in ``u = log t`` on the analytic slope
    :func:`curve_slope` (``K''`` comes with ``K'`` from one traced rule: no derivative of ``K'`` in the loop), a
    bisection where a step leaves the bracket ``[lo, hi]`` (``eps(t)`` increases in ``u``, so the root is bracketed
    and unique).  Not differentiated: :func:`saddle_point` wraps it with the implicit derivative, a sampler stops
    the gradient."""

    def vsa(u):  # (h decreasing in u, its slope, no aux)
        t = jnp.exp(u)
        k1, k2 = k12(t)
        h = -(k1 - epsilon - 1.0 / t - 1.0 / (1.0 + t))
        return h, -curve_slope(t, k2), jnp.zeros_like(h)

    u, _, _ = safeguarded_newton(vsa, lo, hi, u0, ftol=0.0, xtol=SADDLE_XTOL)
    return u


#: the saddle-point iteration stops after a Newton step of at most this (in log t; its error is then ~ its square)
SADDLE_XTOL = 1e-10


def saddle_point(comp: Composition, direction: str, epsilon):
    """``t*`` solving ``K'(t) = eps + 1/t + 1/(1+t)`` (differentiable: the implicit derivative at the root of
    :func:`solve_saddle_point`)."""

    def h(u):  # decreasing in u = log t
        t = jnp.exp(u)
        _, k1 = k01(comp, direction, t)
        return -(k1 - epsilon - 1.0 / t - 1.0 / (1.0 + t))

    u0 = guess_log_t_for_epsilon(comp, epsilon)
    lo, hi = log_t_bracket(u0)
    comp_c, eps_c = jax.lax.stop_gradient((comp, epsilon))

    def solver(x0):
        return solve_saddle_point(lambda t: k012(comp_c, direction, t)[1:], eps_c, x0, lo, hi)

    return jnp.exp(solve_decreasing(h, lo, hi, x0=u0, solver=solver))


def leading_on_curve(k0, k1, k2, t):
    """``(eps(t), log delta)`` of the leading saddle-point term at the curve's point ``t``:
    ``log delta ~ K - t eps - log(t (1 + t)) - log(2 pi K'') / 2``.  Not a bound (:func:`log_deltas` is): the
    guide a sampler centres its tilts and epsilon grid on."""
    eps = k1 - 1.0 / t - 1.0 / (1.0 + t)
    return eps, k0 - t * eps - jnp.log(t * (1.0 + t)) - 0.5 * jnp.log(2.0 * math.pi * jnp.maximum(k2, 1e-300))


def tilt_for_log_delta(k012_at, log_delta, lo, hi, iterations):
    """The curve's ``t`` where :func:`leading_on_curve`'s ``log delta`` is ``log_delta``: the saddle point of a
    fixed delta, for samplers (``k012_at(t) -> (K, K', K'')``).  A fixed number of bisections in ``log t`` on
    ``[lo, hi]`` (the leading term decreases with ``t``), robust where ``K`` is a rough grid sum; no derivative."""

    def root_above(m):
        t = jnp.exp(m)
        return ~(leading_on_curve(*k012_at(t), t)[1] < log_delta)

    a, b = bisect(root_above, jnp.asarray(lo), jnp.asarray(hi), iterations)
    return jnp.exp(0.5 * (a + b))


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


def curve_slope(t, k2):
    """``d eps / d log t`` along the saddle-point curve ``eps(t) = K'(t) - 1/t - 1/(1+t)``."""
    return t * (k2 + 1.0 / (t * t) + 1.0 / ((1.0 + t) * (1.0 + t)))


#: the iteration along the curve stops where the log delta is this close to the target
LOG_DELTA_TOL = 1e-9
CURVE_MAX_ITERATIONS = 40
#: ... or where its step in u = log t is this small (relative)
CURVE_XTOL = 1e-9
#: ... or, after a secant step, where the error predicted for the next point is this small (that step is then
#: taken without evaluating its end, unless the caller needs the evaluation there)
CURVE_PREDICTED_TOL = 1e-7


def iterate_on_curve(
    point,
    operands,
    log_delta,
    lo,
    hi,
    u0,
    *,
    max_jump=2.0,
    evaluated=False,
    tol=LOG_DELTA_TOL,
    max_iterations=CURVE_MAX_ITERATIONS,
    predicted_tol=CURVE_PREDICTED_TOL,
):
    """The ``u = log t`` on the saddle-point curve where ``point``'s ``log delta(eps(t))`` is ``log_delta``.

    ``point(operands, t) -> (eps, d eps / d u, log delta, d log delta / d u, aux)`` evaluates an accountant at the
    curve's point of tilt ``t``.  Where it gives ``d log delta / d u`` (finite), the step is Newton's in ``u``
    (for a smooth, cheap ``log delta``: ``delta_2``'s); where not, as follows.  At small sampling rates ``eps(t)``
    is very steep in ``t`` (the rare jumps make ``K''`` large) and ``log delta(eps(t))`` bends sharply there, so a
    secant in ``u`` needs many steps.  In ``eps`` the same
    function is smooth, of slope about ``-t``: each step is a secant in ``eps`` (the first with slope ``-t``),
    mapped back to ``u`` with the curve's slope ``d eps / d u`` at the last point (only a step: every point
    evaluated is on the curve).  A step that leaves an established bracket is a bisection.  A point whose ``eps``
    is not finite but whose ``log delta`` is (a bound that could not be checked there, reported as past the root)
    gives no step, nor does a ``log delta`` floored at -1e8 (delta underflowing far past the root) where the step
    is a secant: the iteration moves toward the bracket's middle (at most ``max_jump``); a non-finite ``log delta``
    stops it with ``u = NaN``.

    Vectorised: ``log_delta``, ``lo``, ``hi`` and ``u0`` may be arrays of one shape, independent iterations in one
    loop whose ``point`` is traced once and evaluated on all of their tilts together (each stops on its own).  A
    scalar iteration under a user's ``vmap`` evaluates only the configurations still iterating (``sparse_cond``).

    ``evaluated``: the ``u`` returned is a point evaluated last (a last step, predicted to land on the root or at the
    resolution of ``u``, is evaluated in one more iteration), and ``(eps, aux)`` of that evaluation come back with
    it (a caller that needs the accountant at the answer then does not trace ``point`` a second time).  ``tol``:
    the iteration stops where ``log delta`` is this close to the target, ``max_iterations`` after that many
    evaluations (both may be traced); ``predicted_tol``: or takes a last secant step without evaluating its end
    where the error predicted there is this small (0: never).

    Returns ``(u, iterations, (eps, aux))`` (``(eps, aux)`` of the last evaluation, of the returned ``u`` where
    ``evaluated``).
    """
    scalar = jnp.ndim(u0) == 0

    def at(ops):
        eps, deps, log_d, d_log_d, aux = point(ops[0], jnp.exp(ops[1]))
        # for the secant, delta underflowing to 0 far past the root is a finite stand-in, which gives no step (its
        # eps reads as unknown: the iteration moves toward the bracket's middle, as from an unchecked point)
        floored = ~jnp.isfinite(d_log_d) & (log_d <= -1e8)
        return jnp.where(floored, jnp.nan, eps), deps, jnp.where(floored, -1e8, log_d), d_log_d, aux

    u0 = jnp.clip(u0, lo, hi)
    # ``point`` traced once: the loop's first state needs its output shapes before the body calls it
    at_once, shapes = traced_once(at, (operands, u0))

    def evaluate(u, active):
        if not scalar:
            return at_once((operands, u))
        # under ``vmap`` the loop runs until the slowest configuration is done (a grid's iteration counts vary
        # several-fold): only those still iterating are evaluated (``sparse_cond``)

        def skip(ops):  # (a configuration of the batch that is done: its state is kept, these are dropped)
            return zeros_of(shapes)

        return sparse_cond(active, at_once, skip, (operands, u), true_unless_batched=True)

    def cond(state):
        return (state[0] < max_iterations) & ~jnp.all(state[-1])

    def body(state):
        i, a, b, u, e_prev, g_prev, dx_old, pending, _, _, stop = state
        eps, deps, g, dg, aux = evaluate(u, ~stop)
        g = g - log_delta
        bad = ~jnp.isfinite(g)
        known = jnp.isfinite(eps)
        a = jnp.where(g > 0, u, a)
        b = jnp.where((g > 0) | bad, b, u)
        t = jnp.exp(u)
        secant = (g - g_prev) / (eps - e_prev)
        slope = jnp.where(jnp.isfinite(secant) & (secant < 0) & (i > 0), secant, -t)
        step = jnp.where(jnp.isfinite(dg), g / dg, g / slope / deps)
        u_new = u - step
        # rtsafe's safeguard inside an established bracket: bisect where the step leaves it or fails to halve the
        # step before last (the curve's slope can change by orders of magnitude within a bracket); before both
        # ends are established, the step capped at max_jump (a bisection toward the default bracket's far end
        # lands far off the curve's steep part, and costs many evaluations to come back)
        both = (a > lo) & (b < hi)
        inside = jnp.isfinite(u_new) & (u_new > a) & (u_new < b)
        ok = inside & known & (~both | (2.0 * jnp.abs(step) <= dx_old))
        toward = jnp.where(known & jnp.isfinite(u_new), u_new, jnp.where(known, u, 0.5 * (a + b)))
        toward = jnp.clip(toward, u - max_jump, u + max_jump)
        # the last secant step is taken without evaluating its end: the secant converges superlinearly, so the
        # error there is about |g| |g / g_prev|
        last = (i > 0) & ok & (jnp.abs(g) * jnp.minimum(1.0, jnp.abs(g / g_prev)) <= predicted_tol)
        u_new = jnp.where(ok, u_new, jnp.where(both, 0.5 * (a + b), jnp.clip(toward, a, b)))
        # done where delta is on target, or the step is at the resolution of u (delta's rounding floor)
        small = jnp.abs(u_new - u) <= CURVE_XTOL * (1.0 + jnp.abs(u))
        # (eps <= 0 with delta on or below target: the answer is eps = 0, as the caller clips it)
        at_zero = (eps <= 0.0) & (g <= 0.0)
        on_target = jnp.abs(g) <= tol
        done = on_target | last | (b - a <= CURVE_XTOL * (1.0 + jnp.abs(u))) | at_zero | bad
        u_new = jnp.where(done, jnp.where(bad, jnp.nan, jnp.where(last & ~on_target & ~at_zero, u_new, u)), u_new)
        stop_new = done | small
        if evaluated:  # a step into the answer is evaluated in one more iteration, which then stops there
            stop_new = pending | (stop_new & ~((u_new != u) & jnp.isfinite(u_new)))
            u_new = jnp.where(pending, jnp.where(bad, jnp.nan, u), u_new)
            pending_new = ~stop_new & (done | small)
        else:
            pending_new = pending
        new = (i + 1, a, b, u_new, eps, g, jnp.abs(u_new - u), pending_new, u, (eps, aux), stop_new)

        # (a vector of iterations: one that has stopped keeps its state)
        def keep(old, nw):
            return jnp.where(stop.reshape(stop.shape + (1,) * (jnp.ndim(nw) - stop.ndim)), old, nw)

        return (i + 1, *jax.tree.map(keep, state[1:], new[1:]))

    zero = jnp.zeros_like(u0)
    ev0 = zeros_of((shapes[0], shapes[4]))
    no = jnp.zeros(jnp.shape(u0), bool)
    init = (jnp.array(0), lo, hi, u0, zero, zero, 2.0 * (hi - lo), no, u0, ev0, no)
    state = jax.lax.while_loop(cond, body, init)
    # (where the iteration failed, u = NaN: its last evaluation is that of the failure)
    u = jnp.where(jnp.isnan(state[3]), jnp.nan, state[8]) if evaluated else state[3]
    return u, state[0], state[9]


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
