"""The bounds the accountants share: the saddle point's ``delta_2`` and its proven bound, the pure-DP bound,
the screen stage, and the Rényi-DP curve with its conversion.

The saddle point ``t*`` solves ``K'(t*) = eps + 1/t* + 1/(1 + t*)`` for the composed CGF ``K``
(Alghamdi, Gomez, Asoodeh, Calmon, Kosut & Sankar, ICML 2023).  ``delta_2`` is the paper's one-Gaussian
approximation at ``t*`` (an estimate); the certified bound is ``min(1, delta_2 + bound, Chernoff bound)`` with a
Berry-Esseen error bound valid at any ``t > 0``, from moments whose quadrature is checked; every epsilon it returns
is re-checked, and where the moments cannot be resolved the bound is vacuous (delta = 1).  Root solves are
iterations in ``log t`` with implicit gradients (a ``custom_jvp``, traced only where a derivative is asked for).

The Rényi-DP curve ``r(alpha) = sum_i n_i K_i(alpha - 1) / (alpha - 1)`` of a composition (quadrature for
mixtures, so any real order works) is converted to (epsilon, delta) by Canonne, Kamath & Steinke (2020) /
Asoodeh et al. (2021) and minimised over orders: a static grid of 200 orders ``alpha - 1 in [1e-2, 1e4]``, refined
around the best (:func:`~jaxdp.numerics.minimize_on_grid`).  The conversion is a proven bound at every order; an
order whose quadrature is unresolved is ``+inf`` (skipped), never a finite guess.

Method modules (``_saddlepoint``, ``_rdp``, ``_characteristic``, ``certified``, ...) register these as methods or
use them as starting points, screens and fallbacks; they import this module and ``_cgf``, never one another.
Derivations: ``docs/accountants/saddlepoint.md``, ``docs/accountants/rdp.md`` and ``docs/soundness.md``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.accountants._cgf import (
    LOG_DELTA_TOL,
    curve_slope,
    eps_on_curve,
    guess_log_t_for_delta,
    iterate_on_curve,
    k01,
    k012,
    log_delta2_on_curve,
    log_deltas,
    log_t_bracket,
    saddle_point,
)
from jaxdp.mechanisms import Composition
from jaxdp.numerics import (
    log1mexp,
    log1p,
    minimize_on_grid,
    nan_to,
    root_and_value_found_elsewhere,
    root_found_elsewhere,
    solve_decreasing,
)

__all__ = [
    "LOG_ORDER_GRID",
    "SaddlePointResult",
    "epsilon_rdp",
    "epsilon_saddlepoint",
    "epsilon_saddlepoint_upper",
    "log_delta_rdp",
    "log_delta_saddlepoint",
    "log_delta_saddlepoint_upper",
    "pure_dp_log_delta",
    "rdp_curve",
    "saddle_point",
    "saddlepoint_terms",
    "screen_stage",
]

MOMENT_INFLATION = 1.001
EPS_MARGIN = 1e-10
EPS_RETRY_MARGINS = (1e-10, 1e-7, 1e-4)  # relative margins tried when re-checking a certified epsilon
LOG_DELTA_MARGIN = 1e-6  # added to the certified log delta (covers the checked moments' residual error)
BERRY_ESSEEN_IID = 0.4748  # Shevtsova (2011), identically distributed summands
BERRY_ESSEEN = 0.56  # Shevtsova (2010), independent non-identical summands


class SaddlePointResult(NamedTuple):
    """Saddle-point quantities for one epsilon (all float64; deltas in log space).

    Attributes:
      saddle_point: ``t*``.
      log_delta_vanilla: ``log delta_1``.
      log_delta: ``log delta_2`` (the estimate).
      log_error_bound: log of the error bound.
      log_delta_upper: ``log min(1, delta_2 + bound)`` (certified upper bound).
    """

    saddle_point: jax.Array
    log_delta_vanilla: jax.Array
    log_delta: jax.Array
    log_error_bound: jax.Array
    log_delta_upper: jax.Array


def _berry_esseen(comp):
    identical = getattr(comp, "identical_steps", True)  # a bool, or traced for a stack
    return jnp.where(identical, BERRY_ESSEEN_IID, BERRY_ESSEEN)


def _log_bound_from(comp, k0, k2, p3, t, epsilon):
    """log of ``e^{K - eps t} 2 C / (1 + t) (t / (1 + t))^t P / K''^{3/2}`` (``P`` inflated)."""
    log_c = jnp.log(2.0 * _berry_esseen(comp))
    return (
        k0
        - epsilon * t
        + log_c
        - jnp.log1p(t)
        - t * jnp.log1p(1.0 / t)
        + jnp.log(MOMENT_INFLATION * p3)
        - 1.5 * jnp.log(k2)
    )


def _log_bound(comp, direction, k0, k2, t, epsilon):
    return _log_bound_from(comp, k0, k2, comp.tilted_abs_moment(t, direction), t, epsilon)


def certified_log_delta_at(comp, direction, t, epsilon):
    """Certified ``log delta(eps)`` from the saddle-point bound at any tilt ``t > 0`` (0 where unverified).

    The error theorem holds at every ``t > 0``, so ``t`` need not be the exact saddle point: it is
    checked only to be finite and positive.  The moments come from
    :meth:`~jaxdp.mechanisms.AbstractMechanism.checked_moments`; anything unresolved or
    non-finite gives the vacuous ``log delta = 0``.
    """
    _, upper = _certified_upper(comp, direction, t, epsilon)
    upper = nan_to(jnp.minimum(upper, 0.0), 0.0)
    return jnp.minimum(upper, pure_dp_log_delta(comp, direction, epsilon))


def _certified_upper(comp, direction, t, epsilon=None):
    """``(eps, log min(delta_2 + bound, Chernoff bound) + margins)`` at tilt ``t`` from the checked moments,
    NaN where unverified (see :func:`_upper_from_moments`).

    ``epsilon=None`` takes the point of the saddle-point curve, ``eps = K'(t) - 1/t - 1/(1+t)``.
    """
    m = comp.checked_moments(t, direction)
    eps = m.k1 - 1.0 / t - 1.0 / (1.0 + t) if epsilon is None else epsilon
    return eps, _upper_from_moments(comp, m, t, eps)


def _upper_from_moments(comp, m, t, eps):
    """``log min(delta_2 + bound, Chernoff bound) + margins`` at ``(t, eps)`` from the checked moments ``m`` at
    ``t``, NaN where unverified.

    The Chernoff bound ``e^{K(t) - t eps} (t / (1 + t))^t / (1 + t)`` (``delta = e^{K - t eps} E_t[e^{-t x} (1 -
    e^{-x})_+]``, ``x = L - eps``, and the integrand is at most that maximum) is the tighter of the two where the
    Berry-Esseen term, additive, exceeds it: where the loss is far from Gaussian (rare jumps: small q).
    """
    log_d2, _ = log_deltas(m.k0, m.k1, m.k2, t, eps)
    log_b = _log_bound_from(comp, m.k0, m.k2, m.abs3, t, eps)
    log_chernoff = m.k0 - eps * t - jnp.log1p(t) - t * jnp.log1p(1.0 / t)
    upper = jnp.minimum(jnp.logaddexp(log_d2, log_b), log_chernoff) + m.k0_error + LOG_DELTA_MARGIN
    ok = m.resolved & (t > 0) & jnp.isfinite(t) & jnp.isfinite(upper) & jnp.isfinite(eps)
    return jnp.where(ok, upper, jnp.nan)


def pure_dp_log_delta(comp, direction, epsilon):
    """``log(1 - e^{eps - L_max})`` (``-inf`` from ``L_max`` on; 0 for an unbounded loss).

    ``L <= L_max`` under ``P``, so ``delta(eps) = E_P[(1 - e^{eps - L})_+] <= 1 - e^{eps - L_max}``: the
    bound of a loss bounded above (the add direction of a mixture with a zero-sensitivity component).
    """
    l_max = jax.lax.stop_gradient(comp.max_privacy_loss(direction))
    gap = l_max - epsilon
    pos = gap > 0
    out = jnp.where(pos, log1mexp(-jnp.where(pos, gap, 1.0)), -jnp.inf)
    return jnp.where(jnp.isfinite(l_max), out, 0.0)


def _clip_log_delta(x):
    return jnp.minimum(x, 0.0)


def saddlepoint_terms(comp: Composition, direction: str, epsilon) -> SaddlePointResult:
    """All saddle-point quantities at ``epsilon`` for one direction."""
    t = saddle_point(comp, direction, epsilon)
    k0, k1, k2 = k012(comp, direction, t)
    log_d2, log_d1 = log_deltas(k0, k1, k2, t, epsilon)
    log_b = _log_bound(comp, direction, k0, k2, t, epsilon)
    upper = certified_log_delta_at(comp, direction, t, epsilon)
    return SaddlePointResult(t, _clip_log_delta(log_d1), _clip_log_delta(log_d2), log_b, upper)


def log_delta_saddlepoint(comp, direction, epsilon):
    """``log delta_2(eps)`` (estimate)."""
    return saddlepoint_terms(comp, direction, epsilon).log_delta


def log_delta_saddlepoint_upper(comp, direction, epsilon):
    """``log min(1, delta_2 + bound)`` (certified upper bound)."""
    return saddlepoint_terms(comp, direction, epsilon).log_delta_upper


def _solve_epsilon(comp, direction, log_delta):
    def g(u):  # decreasing in u = log t
        return log_delta2_on_curve(comp, direction, jnp.exp(u)) - log_delta

    u0 = guess_log_t_for_delta(comp, log_delta)
    lo, hi = log_t_bracket(u0)
    u = solve_decreasing(g, lo, hi, x0=u0, max_jump=2.0)
    return jnp.maximum(eps_on_curve(comp, direction, jnp.exp(u)), 0.0)


def _verified_epsilon(comp, direction, log_delta, eps, t, m):
    """The first of ``eps (1 + margin)`` whose certified delta at tilt ``t``, from the moments ``m`` evaluated
    there, is at most the target (the bound holds at every tilt); ``L_max`` (or ``+inf``) when none passes, or
    ``eps`` or ``t`` is not finite: the root finder's answer is never taken on trust."""
    eps_sg = jax.lax.stop_gradient(eps)
    margins = jnp.asarray(EPS_RETRY_MARGINS, jnp.float64)
    cands = eps_sg + margins * (1.0 + jnp.abs(eps_sg))
    logs = nan_to(jnp.minimum(_upper_from_moments(comp, m, t, cands), 0.0), 0.0)
    logs = jnp.minimum(logs, pure_dp_log_delta(comp, direction, cands))
    passed = (logs <= log_delta) & jnp.isfinite(eps_sg) & jnp.isfinite(t)
    # L_max (delta = 0 there) for a loss bounded above
    out = jax.lax.stop_gradient(comp.max_privacy_loss(direction))
    for i in reversed(range(len(EPS_RETRY_MARGINS))):
        out = jnp.where(passed[i], jnp.minimum(eps + margins[i] * (1.0 + jnp.abs(eps)), out), out)
    return out


class ScreenStage(NamedTuple):
    """What the certified saddle-point solve gives a method screened by it (one direction).

    Attributes:
      epsilon: the certified saddle-point epsilon, verified (``L_max`` or ``inf`` where no candidate passes).
      estimate: the epsilon where ``delta_2`` (from the same checked moments) is the target: an estimate, held fixed
        for differentiation; NaN where its solve failed.
      log_t: ``log`` of the estimate's saddle point, with the derivative of the saddle point of a fixed epsilon.
      log_t_screen: ``log`` of the tilt of ``epsilon``'s bound.
    """

    epsilon: jax.Array
    estimate: jax.Array
    log_t: jax.Array
    log_t_screen: jax.Array


def screen_stage(comp, direction, log_delta) -> ScreenStage:
    """The certified saddle-point epsilon and the ``delta_2`` estimate, both from ONE iteration along the saddle-point
    curve on the checked moments (:func:`~jaxdp.accountants._cgf.iterate_on_curve`, two targets evaluated together:
    the moments are traced once), and the certified epsilon checked at the moments of its last evaluation.

    The bound holds at every tilt, so the iteration's answer is not taken on trust: each of ``eps (1 + margin)`` is
    checked at the tilt whose moments were evaluated last, and the first that passes is returned (``L_max``, or
    ``+inf``, where none does).  Derivatives: the implicit function theorem at the root, and the curve's ``eps`` at
    it, both traced only where a derivative is asked for.
    """
    comp_c, log_delta_c = jax.lax.stop_gradient((comp, log_delta))

    def point(ops, t):
        c, ld = ops

        def one(tt):
            m = c.checked_moments(tt, direction)
            return m.k1 - 1.0 / tt - 1.0 / (1.0 + tt), curve_slope(tt, m.k2), m

        eps, deps, m = jax.vmap(one)(t)
        log_d2, _ = log_deltas(m.k0, m.k1, m.k2, t, eps)
        upper = _upper_from_moments(c, m, t, eps)
        # unverified (extreme tilts: the quadrature does not resolve the tilted law) reads as "past the root", so
        # the iteration moves back to moderate tilts
        level = jnp.stack([log_d2[0], jnp.where(jnp.isnan(upper[1]), ld - 1.0, upper[1])])
        eps = jnp.stack([eps[0], jnp.where(jnp.isnan(upper[1]), jnp.nan, eps[1])])
        return eps, deps, level, jnp.full_like(level, jnp.nan), (m, t)

    u0 = guess_log_t_for_delta(comp_c, log_delta_c)
    lo, hi = log_t_bracket(u0)
    two = lambda x: jnp.broadcast_to(x, (2,))  # noqa: E731  (the estimate's target, the bound's)
    ops = (comp_c, log_delta_c)
    # (the bound's level to 1e-12: its check then passes at the first margin)
    tol = jnp.array([LOG_DELTA_TOL, 1e-12])
    u, _, (eps, (m, t_ev)) = iterate_on_curve(
        point, ops, two(log_delta_c), two(lo), two(hi), two(u0), evaluated=True, tol=tol, predicted_tol=0.0
    )

    # the bound's root, checked at the moments evaluated there (at that very tilt: the evaluation's own ``t``)
    u_b = u[1]
    t_b = jnp.where(jnp.isfinite(u_b), t_ev[1], jnp.nan)
    m_b = jax.tree.map(lambda x: x[1], m)

    def g(v, c, d, ld):  # the bound's root condition as the iteration solved it, and its epsilon (traced only for a
        # derivative: every traced value it needs is an operand)
        eps_v, log_upper = _certified_upper(c, direction if d is None else d, jnp.exp(v))
        return jnp.where(jnp.isnan(log_upper), -1.0, log_upper - ld), eps_v

    d_op = None if isinstance(direction, str) else direction
    _, eps_d = root_and_value_found_elsewhere(
        g, jnp.where(jnp.isfinite(u_b), u_b, u0), eps[1], lo, hi, operands=(comp, d_op, log_delta)
    )
    out = _verified_epsilon(comp_c, direction, log_delta_c, jnp.maximum(eps_d, 0.0), t_b, m_b)

    # the estimate's saddle point, with the derivative of the saddle point of its (fixed) epsilon; none from moments
    # the quadrature did not resolve (the callers then fall back to the bound's tilt)
    has_estimate = jnp.isfinite(u[0]) & m.resolved[0]
    estimate = jnp.where(has_estimate, jnp.maximum(eps[0], 0.0), jnp.nan)

    def h(v):  # decreasing in v = log t
        t = jnp.exp(v)
        _, k1 = k01(comp, direction, t)
        return -(k1 - estimate - 1.0 / t - 1.0 / (1.0 + t))

    log_t = root_found_elsewhere(h, jnp.where(has_estimate, u[0], u0), lo, hi)
    return ScreenStage(out, estimate, jnp.where(has_estimate, log_t, jnp.nan), u_b)


def epsilon_saddlepoint(comp, direction, log_delta):
    """epsilon with ``delta_2(eps) = delta`` (estimate)."""
    return _solve_epsilon(comp, direction, log_delta)


def epsilon_saddlepoint_upper(comp, direction, log_delta):
    """epsilon with ``min(1, delta_2 + bound)(eps) = delta`` (certified; see :func:`screen_stage`)."""
    return screen_stage(comp, direction, log_delta).epsilon


# -- the Rényi-DP curve and its conversion

LOG_ORDER_GRID = np.linspace(np.log(1e-2), np.log(1e4), 200)


def rdp_curve(comp: Composition, direction: str, alpha):
    """``r(alpha)`` of the composition in one direction."""
    alpha = jnp.asarray(alpha, jnp.float64)
    return comp.cgf_upper(alpha - 1.0, direction) / (alpha - 1.0)


def _eps_at(comp, direction, log_delta):
    def f(u):
        am1 = jnp.exp(u)
        alpha = 1.0 + am1
        r = rdp_curve(comp, direction, alpha)
        return r + log1p(-1.0 / alpha) - (log_delta + jnp.log(alpha)) / am1

    return f


def epsilon_rdp(comp: Composition, direction: str, log_delta):
    """Smallest epsilon over orders (clamped at 0)."""
    value, _ = minimize_on_grid(_eps_at(comp, direction, log_delta), jnp.asarray(LOG_ORDER_GRID))
    return jnp.maximum(value, 0.0)


def log_delta_rdp(comp: Composition, direction: str, epsilon):
    """Smallest log delta over orders (clamped at 0)."""

    def f(u):
        am1 = jnp.exp(u)
        alpha = 1.0 + am1
        r = rdp_curve(comp, direction, alpha)
        return am1 * (r - epsilon + log1p(-1.0 / alpha)) - jnp.log(alpha)

    value, _ = minimize_on_grid(f, jnp.asarray(LOG_ORDER_GRID))
    return jnp.minimum(value, 0.0)
