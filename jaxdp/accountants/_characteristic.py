"""Characteristic-function accountant: delta(eps) by quadrature on the saddle-point contour.

``delta(eps) = (1 / 2 pi) int exp(K(t + is) - (t + is) eps) / ((t + is)(1 + t + is)) ds`` along the
vertical line through the saddle point (Zhu, Dong & Wang, AISTATS 2022; Alghamdi et al., ICML 2023),
by the trapezoidal rule; the per-step characteristic functions are closed forms or, for mixtures, a
midpoint rule evaluated on the contour by a non-uniform FFT (:mod:`jaxdp.numerics._nufft`).  Method
``"characteristic"`` is an *estimate* (~1e-6 relative at any delta): the aliasing error is bounded,
the truncation and rounding errors are estimated, and where they exceed ``RELIABLE_TOL`` of delta the
certified saddle-point value is returned instead.

Derivation and guarantees: ``docs/accountants/characteristic.md``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxdp.accountants import _bounds, _cgf
from jaxdp.accountants._cgf import NUM_NODES, composed_log_phi, line_nodes
from jaxdp.accountants._registry import CompileHints, MethodInfo, with_fallback
from jaxdp.mechanisms import Composition
from jaxdp.numerics import log1p, solve_decreasing

__all__ = [
    "CharacteristicResult",
    "characteristic_terms",
    "epsilon_characteristic",
    "log_delta_characteristic",
]

#: Each aliasing side is kept below this fraction of delta.
ALIAS_TOL = 1e-15
#: Multiples of t at which the Chernoff bound for the m > 0 aliases is tried.
_CHERNOFF_STEPS = tuple(2.0**k for k in range(-8, 3))
#: Relative size of the error terms above which the quadrature is not trusted.
RELIABLE_TOL = 1e-3
#: Floor of the relative error of one step's tilted characteristic function (the mixture rule and the
#: non-uniform FFT resolve it to ~5e-12 relative; the defect of ``phi(0) = 1`` measures it above the floor).
PHI_REL_FLOOR = 1e-13


class CharacteristicResult(NamedTuple):
    """The contour quadrature for one epsilon and direction (deltas in log space).

    Attributes:
      t: abscissa of the contour (the saddle point).
      ds: node spacing on the contour.
      s_max: truncation point ``NUM_NODES * ds``.
      log_delta: log of the quadrature estimate of delta.
      log_alias_bound: log of the proven bound on the aliasing error.
      log_truncation_estimate: log of the estimated truncation error.
      reliable: the error terms are below ``RELIABLE_TOL`` times delta; where they are not,
        the accountant returns the certified saddle-point bound instead.
      log_rounding_estimate: log of the estimated error from the terms' own errors, amplified
        where they cancel (see ``_log_rounding``).
    """

    t: jax.Array
    ds: jax.Array
    s_max: jax.Array
    log_delta: jax.Array
    log_alias_bound: jax.Array
    log_truncation_estimate: jax.Array
    reliable: jax.Array
    log_rounding_estimate: jax.Array


class _Contour(NamedTuple):
    t: jax.Array
    ds: jax.Array
    eps: jax.Array  # the epsilon the nodes were built for
    k_t: jax.Array  # K(t)
    log_f: jax.Array  # log of f(s_k) exp(-(K(t) - t eps)), complex, shape (NUM_NODES,)
    chernoff_a: jax.Array  # the Chernoff grid a (for the aliasing bound)
    chernoff_k: jax.Array  # K(t + a)


# --- per-step characteristic functions ----------------------------------------------


# --- the contour -------------------------------------------------------------------


def _log_chernoff_const(t):
    """``log[(t/(1+t))^t / (1+t)]``: ``sup_u (1 - e^-u) e^{-t u}``."""
    return t * (jnp.log(t) - jnp.log1p(t)) - jnp.log1p(t)


def _chernoff_cgfs(comp, direction, t):
    """``(a, K(t + a))`` on the grid ``a = t * _CHERNOFF_STEPS`` (one vmapped CGF)."""
    a = t * jnp.asarray(_CHERNOFF_STEPS)
    return a, jax.vmap(lambda x: comp.cgf(x, direction))(t + a)


def _log_chernoff_pos(t, eps, a, k_ta):
    """``log[exp(K(t + a) - (t + a) eps) (t'/(1+t'))^t' / (1+t')]`` at ``t' = t + a`` (vector)."""
    return k_ta - (t + a) * eps + _log_chernoff_const(t + a)


def _period(t, eps, a, k_ta, log_delta_est):
    """Smallest aliasing period ``P`` with both alias sides below ``ALIAS_TOL * delta_est``."""
    log_target = log_delta_est + math.log(ALIAS_TOL) - math.log(2.0)
    p_neg = -log_target / t  # sum_{m<0} exp(-t P |m|) delta(.) <= 2 exp(-t P)
    cand = (_log_chernoff_pos(t, eps, a, k_ta) - log_target) / a
    p_pos = jnp.min(jnp.where(jnp.isfinite(cand), cand, jnp.inf))
    return jnp.maximum(p_neg, p_pos)


def _log_alias_bound(t, eps, period, a, k_ta):
    """Proven bound on ``|sum_{m != 0} exp(t P m) delta(eps + P m)|`` (log).

    ``m < 0``: ``delta <= 1``, so the sum is at most ``e^{-tP} / (1 - e^{-tP})``.  ``m > 0``:
    the Chernoff bound at ``t' = t + a`` gives ``exp(K(t') - t' eps) c(t') e^{-aP} / (1 - e^{-aP})``;
    the best ``a`` of the grid is taken.
    """
    neg = -t * period - log1p(-jnp.exp(-t * period))
    cand = _log_chernoff_pos(t, eps, a, k_ta) - a * period - log1p(-jnp.exp(-a * period))
    pos = jnp.min(jnp.where(jnp.isfinite(cand), cand, jnp.inf))
    return jnp.logaddexp(neg, pos)


def _build_contour(comp: Composition, direction: str, eps, t) -> _Contour:
    t = jax.lax.stop_gradient(t)
    sg_comp = jax.lax.stop_gradient(comp)
    k_t, k1, k2 = _cgf.k012(comp, direction, t)  # only K(t) keeps its gradient
    k_sg, k1, k2 = jax.lax.stop_gradient((k_t, k1, k2))
    log_d2, _ = _cgf.log_deltas(k_sg, k1, k2, t, eps)
    log_d2 = jnp.where(jnp.isfinite(log_d2), log_d2, k_sg - t * eps)
    a, k_ta = _chernoff_cgfs(sg_comp, direction, t)
    period = _period(t, eps, a, k_ta, log_d2)

    nodes, s_res = line_nodes(comp, direction, t)
    ds = jax.lax.stop_gradient(jnp.minimum(2.0 * math.pi / period, s_res / NUM_NODES))
    log_phi = composed_log_phi(comp, direction, t, nodes, ds)
    s = ds * jnp.arange(NUM_NODES, dtype=jnp.float64)
    z = t + 1j * s
    log_f = log_phi - 1j * s * eps - jnp.log(z) - jnp.log1p(z)
    return _Contour(t, ds, eps, k_t, log_f, a, k_ta)


def _contour_log_delta(contour: _Contour, eps):
    """``log delta(eps)`` from the contour nodes (``eps`` near ``contour.eps``)."""
    t, ds = contour.t, contour.ds
    s = ds * jnp.arange(NUM_NODES, dtype=jnp.float64)
    shift = eps - contour.eps
    log_terms = contour.log_f - 1j * s * shift
    weights = jnp.ones(NUM_NODES).at[0].set(0.5)
    m = jax.lax.stop_gradient(jnp.max(jnp.real(log_terms)))
    total = jnp.sum(weights * jnp.real(jnp.exp(log_terms - m)))
    log_sum = jnp.log(jnp.maximum(total, 1e-300)) + m
    return contour.k_t - t * eps + log_sum + jnp.log(ds / math.pi)


def _contour_alias(contour: _Contour, eps):
    """The aliasing bound (log) of the contour's node spacing at ``eps``."""
    period = 2.0 * math.pi / contour.ds
    return _log_alias_bound(contour.t, eps, period, contour.chernoff_a, contour.chernoff_k)


def _log_chernoff(contour: _Contour, eps):
    """The Chernoff bound ``delta <= exp(K(t) - t eps) (t/(1+t))^t / (1+t)`` (a safeguard)."""
    return _log_chernoff_pos(contour.t, eps, 0.0, contour.k_t)


def _log_truncation(contour: _Contour):
    """Estimated truncation error relative to ``exp(K(t) - t eps)`` (log).

    The partial sum over the last 1/32 of the nodes: if the integrand has decayed (or
    averages out) before ``s_max`` it is negligible; where a narrow spike of the loss
    law keeps the integrand alive it is of the order of delta.  An a-posteriori
    estimate of the error's order of magnitude (it may fall below the actual error), not a bound.
    """
    m = jax.lax.stop_gradient(jnp.max(jnp.real(contour.log_f)))
    tail = jnp.abs(jnp.sum(jnp.real(jnp.exp(contour.log_f[NUM_NODES - NUM_NODES // 32 :] - m))))
    return jnp.log(jnp.maximum(tail, 1e-300)) + m + jnp.log(contour.ds / math.pi)


def _log_rounding(contour: _Contour, comp: Composition, eps):
    """Estimated error of the sum from the errors of its terms (log, absolute like ``delta``).

    Each term carries the relative error of the composed characteristic function (the rule's error of
    one step times the number of steps; measured by the defect of ``phi(0) = 1``, at least
    ``PHI_REL_FLOOR`` a step) plus rounding.  Where the terms cancel, i.e. ``delta`` is far below
    ``sum |f(s_k)|`` (a tilted law with two modes and ``eps`` in the valley between them: few steps
    sampled, ``delta`` ~ 1e-14), that error is amplified by the cancellation, and the sum can be far off
    while the aliasing and truncation terms are tiny: without this term the quadrature would vouch for a
    wrong ``delta``.  An a-posteriori estimate, not a bound.
    """
    t = contour.t
    phi0 = contour.log_f[0] + jnp.log(t) + jnp.log1p(t)  # log phi(0) of the composition: 0 exactly
    steps = sum(jnp.sum(jnp.asarray(n, jnp.float64)) for n in comp.counts)
    eta = 2.0 * jnp.abs(phi0) + PHI_REL_FLOOR * steps + NUM_NODES * 2.2e-16
    m = jax.lax.stop_gradient(jnp.max(jnp.real(contour.log_f)))
    total = jnp.sum(jnp.exp(jnp.real(contour.log_f) - m))
    base = contour.k_t - t * eps
    return jax.lax.stop_gradient(base + m + jnp.log(total) + jnp.log(contour.ds / math.pi) + jnp.log(eta))


def _clip(x):
    return jnp.minimum(x, 0.0)


def _reliable(log_delta, log_alias, log_trunc, log_chernoff, log_round):
    limit = log_delta + math.log(RELIABLE_TOL)
    ok = jnp.isfinite(log_delta) & (log_alias < limit) & (log_trunc < limit) & (log_round < limit)
    ok = ok & (log_delta > -700.0)
    # beyond (or at) the edge of the loss's support the Chernoff bound proves delta negligible
    return ok | (log_chernoff < -690.0)


def characteristic_terms(comp: Composition, direction: str, epsilon) -> CharacteristicResult:
    """The contour quadrature at ``epsilon`` for one direction, with its error terms."""
    t = _cgf.saddle_point(jax.lax.stop_gradient(comp), direction, epsilon)
    contour = _build_contour(comp, direction, epsilon, t)
    log_chernoff = _log_chernoff(contour, epsilon)
    log_delta = jnp.minimum(_contour_log_delta(contour, epsilon), log_chernoff)
    base = contour.k_t - contour.t * epsilon
    log_alias = _contour_alias(contour, epsilon)
    log_trunc = _log_truncation(contour) + base
    log_round = _log_rounding(contour, comp, epsilon)
    return CharacteristicResult(
        contour.t,
        contour.ds,
        contour.ds * NUM_NODES,
        _clip(log_delta),
        log_alias,
        log_trunc,
        jax.lax.stop_gradient(_reliable(log_delta, log_alias, log_trunc, log_chernoff, log_round)),
        log_round,
    )


def log_delta_characteristic(comp, direction, epsilon, unreliable="fallback"):
    """``log delta(eps)`` by the contour quadrature (estimate, see the module docstring).

    Where the quadrature cannot vouch for its accuracy (``reliable`` is false: few steps
    with a tiny sampling rate, whose privacy-loss law has a spike too narrow for the
    contour) the certified saddle-point bound is returned instead, or NaN with
    ``unreliable="nan"`` (see :func:`log_delta_characteristic_or_nan`).
    """
    r = characteristic_terms(comp, direction, epsilon)
    if unreliable == "nan":
        fallback = jnp.nan
    else:
        fallback = _bounds.log_delta_saddlepoint_upper(comp, direction, epsilon)
    return jnp.where(r.reliable, r.log_delta, fallback)


def log_delta_characteristic_or_nan(comp, direction, epsilon):
    """``log delta(eps)`` by the contour quadrature, NaN where it cannot vouch for its accuracy (the entry
    points then answer with the fallback, see ``with_fallback``)."""
    return log_delta_characteristic(comp, direction, epsilon, unreliable="nan")


def _solve_on_contour(contour: _Contour, log_delta, lo, hi, x0):
    def g(e):
        return _contour_log_delta(contour, e) - log_delta

    return solve_decreasing(g, lo, hi, x0=x0)


def epsilon_characteristic(comp, direction, log_delta, unreliable="fallback", stage=None):
    """epsilon with ``delta(eps) = delta`` by the contour quadrature (estimate).

    Where the quadrature is not reliable (see :func:`log_delta_characteristic`) it falls back to the
    certified saddle-point epsilon, or gives NaN with ``unreliable="nan"`` (the entry points' form:
    they then answer with the fallback, see ``with_fallback``).  ``stage``: with ``unreliable="nan"``, the
    certified fallback's screen stage (:class:`~jaxdp.accountants._bounds.ScreenStage`) where the caller has it:
    its ``delta_2`` estimate starts the search, the one :func:`~jaxdp.accountants._bounds.epsilon_saddlepoint`
    solves for otherwise (the two solves agree to their tolerance, ~1e-13 relative).
    """
    sg_comp = jax.lax.stop_gradient(comp)
    if unreliable == "nan":  # (no fallback to trace: the search starts from the delta_2 estimate)
        if stage is None:
            est = _bounds.epsilon_saddlepoint(comp, direction, log_delta)
        else:  # the same estimate from the screen's solve (a user's trace holding the fallback solves it once)
            est = stage.estimate
        est = jax.lax.stop_gradient(est)
        fallback = jnp.nan
        eps0 = jnp.where(jnp.isfinite(est), est, 1.0)
    else:
        # the certified saddle-point epsilon: the fallback, and (above the truth by a few percent
        # to tens of percent) the starting point of the search; the delta_2 estimate from the same solve
        stage = _bounds.screen_stage(comp, direction, log_delta)
        fallback, est = stage.epsilon, jax.lax.stop_gradient(stage.estimate)
        eps0 = jax.lax.stop_gradient(fallback)
        # where the certified value is vacuous (inf: its quadrature unresolved) start from the estimate
        eps0 = jnp.where(jnp.isfinite(eps0), eps0, jnp.where(jnp.isfinite(est), est, 1.0))

    # Pass 1: contour at that start, searched on a wide bracket (the saddle point can be off
    # by tens of percent when few steps sample the record).  Pass 2: the contour
    # re-centred at that root, searched near it.  (A scan keeps one traced copy of a pass.)
    def one_pass(eps, width):
        eps_c = jax.lax.stop_gradient(eps)
        t = _cgf.saddle_point(sg_comp, direction, eps_c)
        contour = _build_contour(comp, direction, eps_c, t)
        lo = jnp.maximum(eps_c - width * (eps_c + 0.1), 0.0)
        hi = jnp.minimum(eps_c + width * (eps_c + 0.1), 2.0 * eps_c + 1.0)
        return _solve_on_contour(contour, log_delta, lo, hi, eps_c), contour

    eps, contours = jax.lax.scan(one_pass, eps0, jnp.array([1e6, 0.1]))
    contour = jax.tree.map(lambda x: x[-1], contours)
    # delta(0) <= delta: epsilon is exactly zero (the solver would stop within its tolerance of it)
    at_zero = jax.lax.stop_gradient(_contour_log_delta(contour, jnp.zeros_like(eps)) <= log_delta)
    eps = jnp.where(at_zero, 0.0, jnp.maximum(eps, 0.0))
    # reliability of the final contour at the root
    eps_sg = jax.lax.stop_gradient(eps)
    base = contour.k_t - contour.t * eps_sg
    log_d = _contour_log_delta(contour, eps_sg)
    log_alias = _contour_alias(contour, eps_sg)
    log_round = _log_rounding(contour, comp, eps_sg)
    ok = at_zero | _reliable(
        log_d, log_alias, _log_truncation(contour) + base, _log_chernoff(contour, eps_sg), log_round
    )
    ok = jax.lax.stop_gradient(ok)
    if unreliable == "nan":  # a root the search did not reach (the bracket missed it) is not vouched for either
        ok = (ok & (jnp.abs(log_d - log_delta) <= 1e-6 * jnp.abs(log_delta))) | at_zero
    return jnp.where(ok, eps, fallback)


METHODS = (
    with_fallback(
        MethodInfo(
            "characteristic",
            certified=False,
            description="characteristic function inverted on the saddle-point contour (estimate; ~1e-6 relative)",
            log_delta=log_delta_characteristic,
            epsilon=epsilon_characteristic,
        ),
        fallback="certified-fast",
        log_delta_or_nan=log_delta_characteristic_or_nan,
        epsilon_or_nan=functools.partial(epsilon_characteristic, unreliable="nan"),
        epsilon_or_nan_given_screen=lambda c, d, a, s: epsilon_characteristic(c, d, a, unreliable="nan", stage=s),
    ),
)

#: how the entry points may compile these (see :class:`~jaxdp.accountants._registry.CompileHints`): the XLA options
#: that shorten the compile of chains of special functions
HINTS = {info.name: CompileHints(quick_compile=True) for info in METHODS}
