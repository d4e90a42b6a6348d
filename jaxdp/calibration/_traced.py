"""The traced search (traced inputs, and arrays over ``HOST_CONFIGURATIONS``): a safeguarded Newton iteration on the
estimate with its own derivative, then the certified check as a ``while_loop``, in one program per query kind
(``_batch_jit``, a ``lax.map`` over the configurations); gradients by the implicit function theorem."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxdp.accountants import internal as _internal
from jaxdp.calibration._result import (
    CERTIFY_ROUNDS,
    CERTIFY_XTOL,
    LINEAR_REACH,
    METHOD_XTOL,
    SAMPLING_PROB_MIN,
    SIGMA_MIN,
    _epsilon,
    _log_gap,
    _nudge,
    _psg_family,
    _status,
)
from jaxdp.mechanisms import PoissonSubsampledGaussian, as_composition
from jaxdp.numerics import (
    implicit_root,
    nan_to,
    program_cache,
    safeguarded_newton,
    to_f64,
    with_slope,
)


def _certify(eps_cert, x, target, max_x, nudge):
    """The smallest ``x' >= x`` (to ``max(CERTIFY_XTOL, nudge)``) whose certified epsilon is at most ``target``.

    ``x`` is a log parameter along which epsilon decreases.  The first evaluation is at
    ``x + nudge`` (usually enough: the nudge is about the check's slack).  While it fails, the
    step grows (1.5x the log-gap, at least doubling); once a passing point is known, the
    bracket ``[failing, passing]`` is narrowed by safeguarded secant steps on the log-gap.
    Only passing points are returned.  Returns ``(x', certified eps, evaluations, ok)``.
    """

    def gap(e):
        return jnp.where(jnp.isfinite(e), _log_gap(e, target), 1.0)

    xtol = jnp.maximum(CERTIFY_XTOL, nudge) + 1e-12

    def cond(state):
        i, a, _, b, _, have_b = state
        narrow = have_b & (b - a <= xtol)
        return (i < CERTIFY_ROUNDS) & ~narrow

    def body(state):
        i, a, ga, b, eb, have_b = state
        grow = a + jnp.maximum(1.5 * ga, nudge * 2.0**i)
        gb = gap(eb)
        w = jnp.clip(ga / jnp.where(ga - gb > 0, ga - gb, 1.0), 0.1, 0.9)  # secant, kept inside the bracket
        x_new = jnp.where(have_b, a + w * (b - a), jnp.where(i == 0, a + nudge, grow))
        x_new = jnp.minimum(x_new, max_x)
        e = eps_cert(x_new)
        ok = e <= target
        a = jnp.where(ok, a, x_new)
        ga = jnp.where(ok, ga, gap(e))
        b = jnp.where(ok, x_new, b)
        eb = jnp.where(ok, e, eb)
        return i + 1, a, ga, b, eb, have_b | ok

    inf = jnp.asarray(jnp.inf, jnp.float64)
    state = (0, x, jnp.asarray(0.0, jnp.float64), jnp.asarray(max_x, jnp.float64), inf, jnp.array(False))
    i, _, _, b, eb, have_b = jax.lax.while_loop(cond, body, state)
    return b, eb, i, have_b


def _largest_certified_count(eps_cert, n, target, max_steps):
    """The largest whole count ``m <= max_steps`` whose certified epsilon ``eps_cert(m)`` is at most ``target``.

    Epsilon increases with the count; ``n`` (the estimate's answer) is checked first.  A bracket
    ``lo < hi`` of a passing and a failing count (``0`` and ``max_steps + 1`` while none is known)
    is narrowed until the two are consecutive: below a failing count, or above a passing one, by
    the measured gap (epsilon grows at least like ``sqrt(steps)`` in this regime, so a move of
    1.5 x 2 x gap x count crosses the target); between the two, by secant steps on the log-gap in
    ``log count`` (epsilon is close to a power of the count there).  Usually two evaluations:
    ``n``, then ``n + 1``.  Returns ``(count, certified eps, evaluations, ok)``: the largest passing
    count found; 0 when even one step fails; the smallest failing count, with ``ok`` false, when
    none passed within ``CERTIFY_ROUNDS``.
    """

    def gap(e):
        return jnp.where(jnp.isfinite(e), _log_gap(e, target), 1.0)

    def cond(state):
        i, lo, _, hi, _ = state
        return (i < CERTIFY_ROUNDS) & (hi - lo > 1)

    def body(state):
        i, lo, e_lo, hi, e_hi = state
        g_lo, g_hi = gap(e_lo), gap(e_hi)
        down = hi - jnp.maximum(1.0, jnp.ceil(-hi * jnp.expm1(-3.0 * g_hi)))
        up = lo + jnp.maximum(1.0, jnp.ceil(lo * jnp.expm1(-3.0 * g_lo)))
        w = -g_lo / (g_hi - g_lo)
        w = jnp.where(jnp.isfinite(w) & jnp.isfinite(e_hi), w, 0.5)  # bisection where a gap is not measured
        log_lo = jnp.log(jnp.maximum(lo, 1.0))
        secant = jnp.floor(jnp.exp(log_lo + w * (jnp.log(hi) - log_lo)))
        m = jnp.where(lo < 1, down, jnp.where(hi > max_steps, up, secant))
        m = jnp.clip(jnp.where(i == 0, n, m), lo + 1, hi - 1)
        e = eps_cert(m)
        ok = e <= target
        return i + 1, jnp.where(ok, m, lo), jnp.where(ok, e, e_lo), jnp.where(ok, hi, m), jnp.where(ok, e_hi, e)

    inf = jnp.asarray(jnp.inf, jnp.float64)
    state = (0, jnp.asarray(0.0, jnp.float64), inf, max_steps + 1.0, inf)
    i, lo, e_lo, hi, e_hi = jax.lax.while_loop(cond, body, state)
    found = lo >= 1
    count = jnp.where(found, lo, jnp.where(hi <= 1, 0.0, hi))
    return count, jnp.where(found, e_lo, e_hi), i, found


# -- the search -----------------------------------------------------------------------------------


def _log_delta_gap(comp, target, log_delta, method):
    """``log(-log delta) - log(-log delta_method(target))``, decreasing in the noise.

    For a Gaussian-like law ``-log delta`` grows like ``sigma^2`` (and ``1 / q^2``), so
    this is nearly linear in ``log sigma`` and Newton converges in a few steps.  NaN
    (overflow at a tiny noise) is read as ``delta = 1``, i.e. ``+inf``.
    """
    if method is None:  # the Gaussian approximation with the same K(1): closed form, only a start
        ld = _internal.log_delta_gaussian(jnp.sqrt(jnp.maximum(comp.gaussian_mu2(), 1e-300)), target)
    else:
        ld = _internal.log_delta_of_composition(comp, target, method)
    neg = -jnp.minimum(nan_to(ld, 0.0), 0.0)
    return jnp.log(-log_delta) - jnp.log(neg)


class _Root(NamedTuple):
    """The search's answer: ``u`` (with implicit derivatives), iterations, whether the root lies
    below / above the bracket, and the method's last evaluation ``(x, h, dh/du, dh/dtarget)``."""

    u: jax.Array
    iterations: jax.Array
    below: jax.Array
    above: jax.Array
    last: tuple


def _solve(h, params, lo, hi, method) -> _Root:
    """Root of the decreasing ``h(u, name, params)`` on ``[lo, hi]``.

    A start from the Gaussian approximation refined on the saddle-point estimate (both cheap),
    then safeguarded Newton on ``method`` (usually one evaluation: it stops once its step is
    below ``METHOD_XTOL``), with implicit derivatives.  ``params[0]`` is the target epsilon.
    """
    frozen_params = jax.lax.stop_gradient(params)  # the loops see constants (no reverse mode through them)

    def frozen(name):
        return lambda u: h(u, name, frozen_params)

    def method_vsa(u):  # h, dh/du and dh/dtarget in one pass (two tangents, one primal)
        def jvp(tu, tt):
            tp = (tt, *(jnp.zeros_like(x) for x in frozen_params[1:]))
            return jax.jvp(lambda v, p: h(v, method, p), (u, frozen_params), (tu, tp))

        values, ders = jax.vmap(jvp)(jnp.array([1.0, 0.0]), jnp.array([0.0, 1.0]))
        return values[0], ders[0], ders[1]

    u0, i0, _ = safeguarded_newton(with_slope(frozen(None)), lo, hi, 0.5 * (lo + hi), 1e-6)
    u0, i0b, _ = safeguarded_newton(with_slope(frozen("delta2")), lo, hi, u0, 1e-9)
    u_star, i1, last = safeguarded_newton(method_vsa, lo, hi, u0, 1e-10, METHOD_XTOL)
    edge = 1e-9 * (1.0 + jnp.abs(hi - lo))
    below = (u_star <= lo + edge) & (last[1] < 0)
    above = (u_star >= hi - edge) & (last[1] > 0)
    return _Root(implicit_root(h, method, u_star, params), i0 + i0b + i1, below, above, last)


def _estimate_at(u, root: _Root, target, direct):
    """The estimate's epsilon at ``u``.

    From the search's last evaluation, to first order (``h(x, eps) = 0`` linearised at
    ``(x_last, target)``; the error is of order ``(u - x_last)^2``, ~1e-8 relative after
    the search's last step and the certification's small shift), or ``direct(u)`` when ``u`` is further than
    ``LINEAR_REACH`` from it.
    """
    u = jax.lax.stop_gradient(u)
    x, g, slope, d_target = jax.lax.stop_gradient(root.last)
    linear = target - (g + slope * (u - x)) / d_target
    near = (jnp.abs(u - x) <= LINEAR_REACH) & jnp.isfinite(linear)
    return jax.lax.cond(near, lambda v: linear, direct, u)


# -- the shared driver ----------------------------------------------------------------------------


def _certify_log_param(eps, u, root: _Root, target, hi, at_edge, method, certify):
    """Certification along a log parameter ``u`` (epsilon decreasing in it), then the estimate.

    Returns ``(u_c, eps_estimate, eps_certified, evaluations, ok)``; ``u_c`` keeps the implicit
    derivatives of ``u`` (the certification shift is a constant for gradients).
    """
    u_sg = jax.lax.stop_gradient(u)
    if certify is None:
        u_c, eps_c, rounds, ok = u, jnp.asarray(jnp.nan, jnp.float64), 0, jnp.asarray(True)
    else:
        nudge = jnp.where(at_edge, 0.0, _nudge(certify))  # a value at the edge is checked as it is
        x_c, eps_c, rounds, ok = _certify(lambda x: eps(x, certify), u_sg, target, hi, nudge)
        u_c = u + jax.lax.stop_gradient(x_c - u)
    eps_e = _estimate_at(u_c, root, target, lambda v: eps(v, method))
    return u_c, eps_e, eps_c, rounds, ok


def _batch(flat, *, core, method, certify, mechanism=None):
    """``core`` (the name of a ``_*_core``) over the flattened configurations, one after the other (each keeps its
    own iteration counts and the certified accountant its cheap branches)."""
    extra = {} if mechanism is None else {"mechanism": mechanism}
    fn = _CORES[core]
    return jax.lax.map(lambda a: fn(*a, method=method, certify=certify, **extra), flat)


_batch_jit = jax.jit(_batch, static_argnames=("core", "method", "certify", "mechanism"))


def _run_batch(core, flat, *, method, certify, mechanism=None):
    """:func:`_batch_jit`, kept on disk by ``program_cache`` for concrete inputs (not with a user's ``mechanism``
    function: its code is not in the key)."""
    static = {"core": core.__name__, "method": method, "certify": certify, "mechanism": mechanism}
    return program_cache.call(_batch_jit, _batch, (flat,), static, keep=mechanism is None)


def _noise_core(target, delta, sampling_prob, num_steps, sigma_max, *, method, certify, mechanism=None):
    family = _psg_family if mechanism is None else (lambda sigma, _: mechanism(sigma))
    log_delta = jnp.log(delta)

    def h(u, name, p):  # decreasing in u = log sigma
        t, ld, n, q = p
        return _log_delta_gap(to_f64(as_composition(family(jnp.exp(u), q), n)), t, ld, name)

    def eps(x, name):
        return _epsilon(family(jnp.exp(x), sampling_prob), num_steps, delta, name)

    lo, hi = math.log(SIGMA_MIN), jnp.log(sigma_max)
    root = _solve(h, (target, log_delta, num_steps, sampling_prob), lo, hi, method)
    u = jnp.where(root.below, lo, root.u)
    u_c, eps_e, eps_c, rounds, ok = _certify_log_param(eps, u, root, target, hi, root.below, method, certify)
    sigma = jnp.where(root.above, jnp.nan, jnp.exp(u_c))
    return sigma, eps_e, eps_c, root.iterations + rounds, _status(root.above, ok, root.below)


# -- sampling probability -------------------------------------------------------------------------


def _q_core(target, delta, sigma, num_steps, *, method, certify):
    log_delta = jnp.log(delta)

    def h(u, name, p):  # decreasing in u = -log q
        t, ld, n, s = p
        return _log_delta_gap(to_f64(as_composition(PoissonSubsampledGaussian(s, jnp.exp(-u)), n)), t, ld, name)

    def eps(x, name):
        return _epsilon(PoissonSubsampledGaussian(sigma, jnp.exp(-x)), num_steps, delta, name)

    lo, hi = 0.0, -math.log(SAMPLING_PROB_MIN)
    root = _solve(h, (target, log_delta, num_steps, sigma), lo, hi, method)
    u = jnp.where(root.below, lo, root.u)  # below: q = 1 already fits
    u_c, eps_e, eps_c, rounds, ok = _certify_log_param(eps, u, root, target, hi, root.below, method, certify)
    q = jnp.where(root.above, jnp.nan, jnp.exp(-u_c))
    return q, eps_e, eps_c, root.iterations + rounds, _status(root.above, ok, root.below)


# -- number of steps ------------------------------------------------------------------------------


def _steps_core(target, delta, sigma, q, max_steps, *, method, certify):
    mech = PoissonSubsampledGaussian(sigma, q)
    log_delta = jnp.log(delta)

    def h(u, name, p):  # decreasing in u = log steps
        t, ld, s, qq = p
        comp = to_f64(as_composition(PoissonSubsampledGaussian(s, qq), jnp.exp(u)))
        return -_log_delta_gap(comp, t, ld, name)

    def eps(m, name):
        return _epsilon(mech, m, delta, name)

    lo, hi = 0.0, jnp.log(max_steps)
    root = _solve(h, (target, log_delta, sigma, q), lo, hi, method)
    infeasible, at_max = root.below, root.above
    u = jax.lax.stop_gradient(root.u)  # an integer answer: no gradient
    n = jnp.where(at_max, max_steps, jnp.maximum(jnp.floor(jnp.exp(u) * (1 + 1e-12)), 1.0))

    if certify is None:
        eps_c, rounds, ok, at_limit = jnp.asarray(jnp.nan, jnp.float64), 0, jnp.asarray(True), at_max
    else:
        n, eps_c, rounds, ok = _largest_certified_count(lambda m: eps(m, certify), n, target, max_steps)
        infeasible = infeasible | (n < 1)
        at_limit = ok & (n >= max_steps)
    eps_e = _estimate_at(jnp.log(jnp.maximum(n, 1.0)), root, target, lambda v: eps(jnp.exp(v), method))
    n = jnp.where(infeasible, jnp.nan, n)
    return n, eps_e, eps_c, root.iterations + rounds, _status(infeasible, ok, at_limit)


_CORES = {f.__name__: f for f in (_noise_core, _q_core, _steps_core)}
