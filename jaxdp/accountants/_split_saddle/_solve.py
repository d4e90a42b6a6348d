"""epsilon for a target delta: one traced iteration of three phases on the curve (start on ``delta_2``, the
estimate, the answer), linearised once where a derivative is asked."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdp.accountants._cgf import (
    CURVE_MAX_ITERATIONS,
    CURVE_PREDICTED_TOL,
    LOG_DELTA_TOL,
    curve_slope,
    eps_on_curve,
    guess_log_t_for_delta,
    iterate_on_curve,
    log_delta2_on_curve,
    log_deltas,
    log_t_bracket,
)
from jaxdp.accountants._split_saddle._estimate import (
    _by_jumps,
    _fused_at,
    _log_delta_at,
    _nojump_cumulants,
    _nojump_terms,
)
from jaxdp.accountants._split_saddle._few import _with_few_steps_epsilon
from jaxdp.accountants._split_saddle._shape import _single_part, _tilted_nodes
from jaxdp.numerics import (
    root_and_value_found_elsewhere,
)

#: the phases of the estimate's solve, one traced iteration (a ``lax.scan`` over them): ``delta_2``'s root (cheap;
#: it starts the next), the estimate's root, and one evaluation of ``eps`` at that root
START, ESTIMATE, ANSWER = 0, 1, 2
#: per phase: the iteration's tolerance in log delta, that of a last step taken unevaluated, and the number of
#: evaluations (the start is solved tightly, though only a start: a loose one is reached by a path that rounding in
#: a batched evaluation can change, and would move the estimate's answer, within its tolerance, under ``vmap``)
PHASE_TOL = (1e-11, LOG_DELTA_TOL, LOG_DELTA_TOL)
PHASE_PREDICTED_TOL = (1e-11, CURVE_PREDICTED_TOL, CURVE_PREDICTED_TOL)
PHASE_EVALUATIONS = (CURVE_MAX_ITERATIONS, CURVE_MAX_ITERATIONS, 1)


def _by_phase(phase, estimate, other):
    """``estimate()`` in the phase :data:`ESTIMATE`, else ``other()``: a ``lax.cond`` on a traced phase, the one
    branch on a Python one (the derivatives' rules: ``lax.cond`` would trace, and differentiate, both)."""
    if isinstance(phase, int):
        return estimate() if phase == ESTIMATE else other()
    return jax.lax.cond(phase == ESTIMATE, estimate, other)


def _start_level(k0, k1, k2, k3, t):
    """``(d eps / d log t, log delta_2, d log delta_2 / d log t)`` at the saddle-point curve's point of tilt ``t``
    from the composed cumulant generating function and its first three derivatives at ``t``."""
    eps = k1 - 1.0 / t - 1.0 / (1.0 + t)
    deps = curve_slope(t, k2)
    log_d2, d_log_d2 = jax.jvp(lambda *a: log_deltas(*a)[0], (k0, k1, k2, t, eps), (t * k1, t * k2, t * k3, t, deps))
    return deps, log_d2, d_log_d2


def _split_phase_point(comp, direction, t, phase):
    """``(eps(t), d eps / d log t, log delta, d log delta / d log t)`` at the saddle-point curve's point of tilt
    ``t``: in the phases other than :data:`ESTIMATE`, ``delta_2`` (and its slope, for Newton's step), in that one
    the split estimate (its slope NaN: secant steps); a ``lax.cond`` on the phase, unbatched under a user's
    ``vmap``, one node set for both."""
    nan = jnp.full_like(jnp.asarray(t, jnp.float64), jnp.nan)
    single = _single_part(comp)
    if single is None:
        eps, deps = jax.jvp(lambda u: eps_on_curve(comp, direction, jnp.exp(u)), (jnp.log(t),), (jnp.ones_like(t),))

        def start():
            u = jnp.log(t)
            return jax.jvp(lambda v: log_delta2_on_curve(comp, direction, jnp.exp(v)), (u,), (jnp.ones_like(u),))

        level, d_level = _by_phase(phase, lambda: (_log_delta_at(comp, direction, t, eps)[1][0], nan), start)
        return eps, deps, level, d_level
    mech, n = single
    t = jnp.asarray(t, jnp.float64)
    nd = _tilted_nodes(mech, direction, t)
    w = jnp.exp(nd.log_w)
    k1 = jnp.sum(w * nd.ell)
    eps = n * k1 - 1.0 / t - 1.0 / (1.0 + t)

    def start():
        centred = nd.ell - k1
        k2, k3 = jnp.sum(w * centred**2), jnp.sum(w * centred**3)
        return _start_level(n * nd.log_m, n * k1, n * k2, n * k3, t)

    def estimate():
        _, shape, terms = _fused_at(mech, n, direction, t, eps, nodes=nd)
        k2s = shape.bulk[1] + shape.jumps * shape.swap[1]  # (not the composed K'': only a step size depends on it)
        k2s = k2s + shape.jumps * (1.0 - shape.jumps / shape.steps) * shape.swap[0] ** 2
        return curve_slope(t, k2s), terms[0], nan

    deps, level, d_level = _by_phase(phase, estimate, start)
    return eps, deps, level, d_level


def _nojump_phase_point(comp, direction, t, phase):
    """:func:`_split_phase_point` where no step can jump (no split)."""
    k0, kappa = _nojump_cumulants(comp, direction, t)
    eps = kappa[0] - 1.0 / t - 1.0 / (1.0 + t)
    deps, level, d_level = _by_phase(
        phase,
        lambda: (curve_slope(t, kappa[1]), _nojump_terms(k0, kappa, t, eps)[0], jnp.full_like(eps, jnp.nan)),
        lambda: _start_level(k0, kappa[0], kappa[1], kappa[2], t),
    )
    return eps, deps, level, d_level


def _epsilon_on_curve(comp, direction, log_delta, point):
    """epsilon with ``point``'s estimated ``delta(eps) = delta`` along the saddle-point curve ``eps(t) = K'(t) - 1/t -
    1/(1+t)`` (``t`` is the saddle point of ``eps(t)``, so no inner solve is needed), and ``log t`` there.

    One iteration (:func:`~jaxdp.accountants._cgf.iterate_on_curve`), traced once, runs the three phases (a
    ``lax.scan``): ``delta_2``'s root (cheap) starts the estimate's, and one more evaluation gives ``eps`` at the
    estimate's root.  The derivatives (implicit function theorem at the root, the curve's ``eps`` there) are traced
    only where one is asked for.
    """
    comp_c, log_delta_c = jax.lax.stop_gradient((comp, log_delta))
    u0 = guess_log_t_for_delta(comp_c, log_delta_c)
    lo, hi = log_t_bracket(u0)

    # a traced direction (the entry points' scan over the two) is an operand, not a closure: the iteration's
    # evaluations are a ``sparse_cond``, whose batching rule must see every tracer it depends on
    direction_op = None if isinstance(direction, str) else direction

    def at(ops, t):
        c, d, phase = ops
        return (*point(c, direction if d is None else d, t, phase), None)

    def phase_step(u, xs):
        phase, tol, predicted_tol, evaluations = xs
        u_new, _, (eps, _) = iterate_on_curve(
            at,
            (comp_c, direction_op, phase),
            log_delta_c,
            lo,
            hi,
            u,
            max_jump=2.0,
            tol=tol,
            max_iterations=evaluations,
            predicted_tol=predicted_tol,
        )
        # (the start's root, where it failed, is the Gaussian guess; the answer's phase only evaluates)
        u_new = jnp.where(phase == START, jnp.where(jnp.isfinite(u_new), u_new, u0), u_new)
        return jnp.where(phase == ANSWER, u, u_new), eps

    phases = (jnp.arange(3), *map(jnp.asarray, (PHASE_TOL, PHASE_PREDICTED_TOL, PHASE_EVALUATIONS)))
    u, eps = jax.lax.scan(phase_step, u0, phases)

    def g(v, c, d, ld):  # decreasing in v = log t (far past the root delta can underflow to 0: a finite stand-in),
        # and the curve's eps there (every phase's, ANSWER's too): one evaluation, traced and linearised only where a
        # derivative is asked for (every traced value it needs is an operand)
        eps_v, _, level, _ = point(c, direction if d is None else d, jnp.exp(v), ESTIMATE)
        return jnp.maximum(level, -1e8) - ld, eps_v

    u, eps = root_and_value_found_elsewhere(
        g, jnp.where(jnp.isfinite(u), u, u0), eps[ANSWER], lo, hi, operands=(comp, direction_op, log_delta)
    )
    return jnp.maximum(eps, 0.0), u


def epsilon_estimate(comp, direction, log_delta):
    """epsilon with estimated ``delta(eps) = delta`` (see :func:`_epsilon_on_curve`)."""

    def split(c, d, ld):
        eps, u = _epsilon_on_curve(c, d, ld, _split_phase_point)
        return _with_few_steps_epsilon(c, d, ld, eps, u)

    return _by_jumps(
        comp,
        direction,
        split,
        lambda c, d, ld: _epsilon_on_curve(c, d, ld, _nojump_phase_point)[0],
        log_delta,
    )
