"""Quadrature for moments of Gaussian mixtures likelihood ratios.

``M(lam) = E_{Z ~ N(0, 1)}[R(Z)^lam]`` for real or complex ``lam``, where
``R(z) = sum_j p_j exp(b_j z - b_j^2 / 2)`` (``b_j = c_j / sigma``) is the likelihood ratio of the
mixture ``sum_j p_j N(c_j, sigma^2)`` against ``N(0, sigma^2)``: the midpoint rule with a static number
of nodes on windows of half-width 20 around the components' centres, ``z = 0`` and the integrand's
mode (the gaps skipped).  Accuracy target 1e-10 relative on ``log M``, validated against mpmath in
``tests/test_quadrature.py``; :func:`checked_moments` applies the rule on two interleaved node sets
and reports whether they agree.

Derivation and accuracy: ``docs/quadrature.md``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxdp.mechanisms._log_ratio import component_posterior, mixture_log_ratio
from jaxdp.numerics import LOG_2PI, argmax, bisect, implicit_root, logsumexp

__all__ = [
    "HALF_WIDTH",
    "NODES_PER_WINDOW",
    "NODES_PER_WINDOW_POSITIVE",
    "CheckedMoments",
    "MixtureRule",
    "checked_moments",
    "log_mixture_moment",
    "mixture_rule",
    "rule_log_moment",
    "rule_tilted_abs_moment",
]

NODES_PER_WINDOW = 64
#: Nodes per window for exponents with ``Re(lam) > 0`` (the remove direction with
#: ``t > -1``): unit-width features need fewer nodes (validated to 1e-10 against
#: mpmath over the same grid).
NODES_PER_WINDOW_POSITIVE = 48
HALF_WIDTH = 20.0
_SCAN_POINTS = 17
_MM_STEPS = 8
_BISECTION_STEPS = 12


def _log_ratio(z, log_p, b):
    """``log R(z)`` in standardised coordinates (``z = x / s``, ``b = c / s``)."""
    return mixture_log_ratio(z, log_p, b, 1.0)


def _weights_mean(z, log_p, b):
    """Posterior mean of ``b`` under weights ``p_j exp(b_j z - b_j^2/2)`` (scalar ``z``)."""
    return jnp.sum(component_posterior(z, log_p, b) * b)


def _mode(lr, log_p, b):
    """Global maximiser of ``g(z) = lr log R(z) - z^2/2``, to within ~1e-2.

    Only the window placement depends on it (a window has half-width 20), so a
    coarse scan over the hull of the centres refined by a few steps suffices:
    minorise-maximise for ``lr >= 0`` (monotone ascent), bisection on the
    decreasing ``g'`` for ``lr < 0`` (``g`` is then concave).
    """
    # the hull of the components of positive weight (one of weight zero, padding, is no part of the law)
    present = log_p > -jnp.inf
    centres = lr * b
    lo = jnp.min(jnp.where(present, centres, jnp.inf))
    hi = jnp.max(jnp.where(present, centres, -jnp.inf))
    grid = jnp.linspace(lo, hi, _SCAN_POINTS)
    g = lr * _log_ratio(grid, log_p, b) - 0.5 * grid * grid
    z0 = grid[argmax(g)]
    spacing = (hi - lo) / (_SCAN_POINTS - 1)

    def mm(_, z):
        return lr * _weights_mean(z, log_p, b)

    z_mm = jax.lax.fori_loop(0, _MM_STEPS, mm, z0)

    a, c = bisect(lambda m: lr * _weights_mean(m, log_p, b) - m > 0, z0 - spacing, z0 + spacing, _BISECTION_STEPS)
    return jnp.where(lr >= 0, z_mm, 0.5 * (a + c))


def _moving_mode(lr, log_p, b):
    """:func:`_mode`, with the derivative of the mode itself: the mode's window is a window of the moving nodes, so
    the rule's value moves with it (by ~1e-5 of the value: the rule's resolution), and a derivative without that
    motion is that far from the value's finite differences.  The search is not differentiated (a gradient program
    would hold the derivative of each of its iterations): the implicit derivative of the root of ``g'(z) = lr wm(z) -
    z``, decreasing at the maximum, from one evaluation there (a custom_jvp rule, traced only where a derivative is
    asked for)."""
    sg = jax.lax.stop_gradient
    m0 = _mode(sg(lr), sg(log_p), sg(b))
    return implicit_root(lambda z, _, p: p[0] * _weights_mean(z, p[1], p[2]) - z, None, m0, (lr, log_p, b))


def _nodes(lr, log_p, b, nodes_per_window, half_width, shift=0.0, mode=None):
    """Midpoint nodes on the union of windows; returns ``(z, log_h)`` (``log_h`` per node).

    ``shift = 1/2`` gives the interleaved set (the other half of the rule of step ``h / 2``).  A component of
    weight zero (padding: :func:`~jaxdp.group_curve` pads every group to one shape) places no window and takes
    no nodes: the rule is that of the components of positive weight, node for node, and the static number of
    nodes left over sits at the mode with weight zero (``log_h = -inf``).
    """
    k = b.shape[0]
    present = log_p > -jnp.inf
    if mode is None:
        mode = _moving_mode(lr, log_p, b)
    # For lr < 0 the integrand is log-concave with curvature <= -1 around its
    # mode, so the component centres carry no mass: collapse them onto the mode
    # (zero-length segments) and spend all nodes on the mode and z = 0 windows.
    # A component of weight zero is collapsed there too.
    comp_centres = jnp.where((lr >= 0) & present, lr * b, mode)
    centres = jnp.sort(jnp.concatenate([comp_centres, mode[None], jnp.zeros(1)]))
    two_w = 2.0 * half_width
    seg = jnp.concatenate([jnp.array([two_w]), jnp.minimum(two_w, jnp.diff(centres))])
    ends = jnp.cumsum(seg)
    total = ends[-1]
    n = (k + 2) * nodes_per_window
    n_used = (jnp.sum(present) + 2) * nodes_per_window
    h = total / n_used
    index = jnp.arange(n, dtype=jnp.float64)
    u = (index + (0.5 + shift)) * h
    # segment j covers u in [ends[j-1], ends[j]) and maps to z = centres[j] + W - (ends[j] - u)
    z = centres[0] + half_width - (ends[0] - u)
    for j in range(1, k + 2):
        z = jnp.where(u >= ends[j - 1], centres[j] + half_width - (ends[j] - u), z)
    used = index < n_used
    return jnp.where(used, z, mode), jnp.where(used, jnp.log(h), -jnp.inf)


class MixtureRule(NamedTuple):
    """Quadrature nodes for one exponent: ``E_Z[f(Z)] ~ sum_i exp(log_w_i) f(z_i)``.

    ``log_r`` holds ``log R(z_i)``, accurate to full relative precision also when
    ``R`` is close to one; it is differentiable in the mixture parameters while
    the node positions are not (see the module docstring).
    """

    z: jax.Array
    log_w: jax.Array
    log_r: jax.Array


def mixture_rule(
    lam_real,
    log_p,
    b,
    *,
    nodes_per_window: int = NODES_PER_WINDOW,
    half_width: float = HALF_WIDTH,
    shift: float = 0.0,
    moving_nodes: bool = False,
    mode=None,
) -> MixtureRule:
    """Nodes, log-weights and ``log R`` values placed for exponent ``lam_real``.

    ``shift=0.5`` places the interleaved nodes (see :func:`checked_moments`).  ``moving_nodes``: the node
    positions and weights are differentiated too (where they follow the components' centres), so that the
    derivative is that of the rule's value itself, node motion included (for integrands the rule resolves
    only to ~1e-5, whose derivative would otherwise miss that much).  ``mode``: :func:`_mode` of the same
    exponent when the caller has it (the two interleaved rules share it).
    """
    log_p = jnp.asarray(log_p)
    b = jnp.asarray(b)
    sg = (lambda v: v) if moving_nodes else jax.lax.stop_gradient
    lr = sg(jnp.asarray(lam_real))
    z, log_h = _nodes(lr, jax.lax.stop_gradient(log_p), sg(b), nodes_per_window, half_width, shift, mode)
    z = sg(z)
    log_w = sg(log_h - 0.5 * z * z - 0.5 * LOG_2PI)
    log_r = _log_ratio(z, log_p, b)
    # log R = log1p(sum_j p_j expm1(b_j z - b_j^2/2)) (the p_j sum to 1) keeps the
    # relative accuracy of R - 1 when R is close to one.
    r_minus_1 = sum(
        jnp.exp(log_p[j]) * jnp.expm1(jnp.minimum(b[j] * z - 0.5 * b[j] * b[j], 50.0)) for j in range(b.shape[0])
    )
    small_r = jnp.abs(r_minus_1) < 0.5
    log_r = jnp.where(small_r, jnp.log1p(jnp.where(small_r, r_minus_1, 0.0)), log_r)
    return MixtureRule(z, log_w, log_r)


def rule_log_moment(lam, rule: MixtureRule):
    """``log E_Z[R(Z)^lam]`` on the nodes of ``rule``."""
    a = lam * rule.log_r
    log_m_big = logsumexp(a + rule.log_w)
    # Near-one branch: M - 1 = E[R^lam - 1] without the rounding of 1 + x (the
    # Gaussian weights integrate to one over the windows).  The branch is chosen
    # from the log-space value, which is accurate in absolute terms everywhere;
    # the clipping below only keeps the unused branch finite.
    small = jnp.abs(log_m_big) < 0.125
    w = jnp.exp(rule.log_w)
    low = jnp.real(a) < 1.0
    a_low = jnp.where(low, a, 0.0 * a)
    a_high = jnp.where(low, 0.0 * a, a + rule.log_w)
    a_high = jnp.where(jnp.real(a_high) > 700.0, 700.0 + 0.0 * a_high, a_high)
    terms = jnp.where(low, jnp.expm1(a_low) * w, jnp.exp(a_high) - w)
    s = jnp.sum(terms)
    log_m_small = jnp.log1p(jnp.where(small, s, 0.0))
    return jnp.where(small, log_m_small, log_m_big)


def rule_tilted_abs_moment(lam, sign, rule: MixtureRule, order: int = 3):
    """``E|L - E L|^order`` of ``L = sign * log R`` under weights ``R^lam``."""
    ell = sign * rule.log_r
    pi = jax.nn.softmax(lam * rule.log_r + rule.log_w)
    mean = jnp.sum(pi * ell)
    return jnp.sum(pi * jnp.abs(ell - mean) ** order)


def log_mixture_moment(
    lam,
    log_p,
    b,
    *,
    nodes_per_window: int = NODES_PER_WINDOW,
    half_width: float = HALF_WIDTH,
):
    """``log E_{Z~N(0,1)}[(sum_j p_j exp(b_j Z - b_j^2/2))^lam]``.

    Args:
      lam: real or complex scalar exponent.
      log_p: log mixture weights, shape ``(K,)`` (``-inf`` allowed).
      b: standardised sensitivities ``c_j / sigma``, shape ``(K,)``.
      nodes_per_window: static number of midpoint nodes per window.
      half_width: half-width of each window in standard deviations.

    Returns:
      The log-moment, real or complex like ``lam`` (principal branch).
    """
    lam = jnp.asarray(lam)
    rule = mixture_rule(jnp.real(lam), log_p, b, nodes_per_window=nodes_per_window, half_width=half_width)
    return rule_log_moment(lam, rule)


#: Agreement required of the two interleaved rules (relative, on ``K``, ``K'`` and ``K''``) for
#: :func:`checked_moments` to call the integrand resolved.
RESOLVED_RTOL = 1e-9
#: ... and on the third absolute central moment: its ``|x|^3`` kink makes the rule converge only
#: algebraically (the halves differ by ~2e-4 relative at unit spacing), so the returned value is
#: raised by the halves' disagreement instead of trusting the combined rule.
RESOLVED_RTOL_ABS3 = 1e-2


class CheckedMoments(NamedTuple):
    """Tilted moments of one step's privacy loss with a resolution check (see :func:`checked_moments`).

    Attributes:
      k0: ``K(t) = log E_P[e^{t L}]``.
      k1: ``K'(t)``, the tilted mean.
      k2: ``K''(t)``, the tilted variance (computed as one, without cancellation).
      abs3: ``E|L_t - E L_t|^3`` under the tilted law.
      k0_error: the two rules' disagreement on ``k0`` (a margin for an upper bound on ``K``).
      resolved: True when the two interleaved rules agree (``RESOLVED_RTOL``) and every value is finite.
    """

    k0: jax.Array
    k1: jax.Array
    k2: jax.Array
    abs3: jax.Array
    k0_error: jax.Array
    resolved: jax.Array


def _rule_moments(lam, sign, rule: MixtureRule):
    """``(K, mean, variance, E|d|^3)`` of ``L = sign log R`` under the weights ``R^lam`` (central moments
    from the deviations, so a nearly constant loss keeps its tiny variance)."""
    k0 = rule_log_moment(lam, rule)
    ell = sign * rule.log_r
    pi = jax.nn.softmax(lam * rule.log_r + rule.log_w)
    mean = jnp.sum(pi * ell)
    d = ell - mean
    d = d - jnp.sum(pi * d)  # one refinement step of the mean: its rounding no longer enters d^2
    d2 = d * d
    return k0, mean, jnp.sum(pi * d2), jnp.sum(pi * d2 * jnp.abs(d))


def _close(a, b, rtol):
    return jnp.abs(a - b) <= rtol * jnp.maximum(jnp.abs(a), jnp.abs(b)) + 1e-300


def checked_moments(lam, sign, log_p, b, *, nodes_per_window: int = NODES_PER_WINDOW) -> CheckedMoments:
    """Tilted moments of ``L = sign log R`` under ``R^lam`` with an a-posteriori resolution check.

    The midpoint rule is applied twice, on its nodes and on the interleaved ones
    (shifted by half a step); together they are the rule of half the step, whose
    values are returned.  The midpoint rule converges geometrically for these
    integrands, so halving the step squares the relative error: where the two
    halves agree to ``RESOLVED_RTOL``, the combined rule is accurate far below
    it.  Where they disagree -- a tilted law narrower than the node spacing
    (the add direction at tilts of ~1e6 and more), a log ratio whose kink is
    sharper than the spacing (tiny noise), overflow -- ``resolved`` is False and
    a certified caller returns a vacuous bound.  Real ``lam`` only.
    """
    lr = jnp.real(jnp.asarray(lam))
    # the two rules place their windows at one mode (traced once)
    mode = _mode(jax.lax.stop_gradient(lr), jax.lax.stop_gradient(jnp.asarray(log_p)), jax.lax.stop_gradient(b))
    kw = dict(nodes_per_window=nodes_per_window, mode=mode)
    r1 = mixture_rule(lr, log_p, b, **kw)
    r2 = mixture_rule(lr, log_p, b, shift=0.5, **kw)
    m1 = _rule_moments(lr, sign, r1)
    m2 = _rule_moments(lr, sign, r2)
    half = jnp.log(0.5)
    both = MixtureRule(
        jnp.concatenate([r1.z, r2.z]),
        jnp.concatenate([r1.log_w, r2.log_w]) + half,
        jnp.concatenate([r1.log_r, r2.log_r]),
    )
    k0, k1, k2, abs3 = _rule_moments(lr, sign, both)
    # K to RESOLVED_RTOL relative (or 1e-15 absolute: near-zero cumulants of a tiny q), the mean on the
    # scale of its deviation, the variance and the third moment relative
    err = jnp.abs(m1[0] - m2[0])
    ok = k0_resolved(k0, err)
    ok &= jnp.abs(m1[1] - m2[1]) <= RESOLVED_RTOL * (jnp.abs(k1) + jnp.sqrt(jnp.abs(k2)))
    ok &= _close(m1[2], m2[2], RESOLVED_RTOL) & _close(m1[3], m2[3], RESOLVED_RTOL_ABS3)
    ok &= jnp.isfinite(k0) & jnp.isfinite(k1) & jnp.isfinite(k2) & jnp.isfinite(abs3) & (k2 > 0)
    # the combined rule's third moment is within a fraction of the halves' disagreement (the rule of
    # half the step cuts an h^4 kink error 16-fold); adding the whole disagreement keeps it an upper value
    abs3 = abs3 + jnp.abs(m1[3] - m2[3])
    return CheckedMoments(k0, k1, k2, abs3, err, ok)


def k0_resolved(k0, k0_error):
    """Is ``K`` resolved: finite, with the halves agreeing to ``RESOLVED_RTOL`` (or 1e-15 absolute)?"""
    return jnp.isfinite(k0) & (k0_error <= RESOLVED_RTOL * jnp.abs(k0) + 1e-15)
