"""Calibration: the noise multiplier, sampling probability or number of steps for a budget.

Each calibration is two solves, both compiled:

1. **Search** with a fast, differentiable *estimate* (``method``, by default the
   characteristic-function accountant, ~1e-6 relative): a safeguarded Newton
   iteration on the log of the parameter, using the accountant's own derivative
   (a bracket guards every step).
2. **Never overshoot**: the answer is checked with a *certified* accountant
   (``certify``, by default ``"certified"``) and moved, by the least amount the
   measured slack calls for, until the certified epsilon is at most the target.
   The parameter is first moved by ``CERTIFY_NUDGE`` (3e-6 relative, about the
   certified bound's slack), so that one certified evaluation usually suffices.

Gradients of the calibrated value with respect to the target epsilon, delta
and the fixed hyperparameters are implicit (implicit function theorem on the
estimate's equation ``eps_est(x) = target``); the certification factor is held
constant.  Every function accepts arrays (broadcast together) and runs them in
one compiled call (``lax.map``: sequential, so that each configuration keeps
its own iteration count and the certified accountant its cheap branches); the
functions can also be ``jax.vmap``-ped or ``jax.jit``-ted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _accountant, _exact, _validate
from jaxdp._mechanisms import PoissonSubsampledGaussian, as_composition
from jaxdp._numerics import float64_scope, to_f64
from jaxdp._pytree import pytree_dataclass

__all__ = [
    "CalibrationResult",
    "TradeoffResult",
    "calibrate",
    "calibrate_noise_multiplier",
    "calibrate_num_steps",
    "calibrate_sampling_prob",
]

CERTIFY_NUDGE = 3e-6  # first move away from the estimate's answer, relative (the certified slack is ~1e-6)
CERTIFY_ROUNDS = 12  # certified evaluations at most (one, usually)
CERTIFY_XTOL = 2e-5  # the check stops within this (log-parameter) distance of the last failing point
SIGMA_MIN = 0.05  # search bracket of the noise multiplier (below: every accountant overflows)
SAMPLING_PROB_MIN = 1e-9

OK = 0
INFEASIBLE = 1  # no value in the allowed range meets the budget
AT_LIMIT = 2  # the budget is met at the edge of the range (q = 1, steps = max_steps, sigma = SIGMA_MIN)
NOT_CERTIFIED = 3  # the certified accountant could not confirm the budget within CERTIFY_ROUNDS

_MESSAGES = {
    ("noise_multiplier", OK): "ok",
    ("noise_multiplier", INFEASIBLE): "even sigma_max does not meet the budget; raise sigma_max or relax the budget",
    ("noise_multiplier", AT_LIMIT): f"sigma = {SIGMA_MIN} (the smallest searched) already meets the budget",
    ("sampling_prob", OK): "ok",
    ("sampling_prob", INFEASIBLE): f"even q = {SAMPLING_PROB_MIN:g} exceeds the budget",
    ("sampling_prob", AT_LIMIT): "q = 1 (no subsampling) already meets the budget",
    ("num_steps", OK): "ok",
    ("num_steps", INFEASIBLE): "even one step exceeds the budget",
    ("num_steps", AT_LIMIT): "max_steps steps already meet the budget",
}


@pytree_dataclass(
    data=(
        "noise_multiplier",
        "sampling_prob",
        "num_steps",
        "epsilon_estimate",
        "epsilon_certified",
        "iterations",
        "status",
    ),
    static=("solved_for", "method", "certify"),
)
class CalibrationResult:
    """The outcome of a calibration (arrays when the inputs were arrays).

    Attributes:
      noise_multiplier, sampling_prob, num_steps: the hyperparameters, the
        solved one included (NaN where no value meets the budget).
      epsilon_estimate: epsilon of ``method`` (the estimate) at the answer.
      epsilon_certified: the certified epsilon at the answer (``<= target``
        wherever ``status`` is 0 or 2); NaN when ``certify`` is None.
      iterations: Newton iterations of the search plus certified evaluations.
      status: 0 ok; 1 infeasible (see :attr:`message`); 2 the budget is met at
        the edge of the allowed range (q = 1, ``max_steps``, the smallest
        sigma searched); 3 the certified accountant did not confirm the budget.
      solved_for: ``"noise_multiplier"``, ``"sampling_prob"`` or ``"num_steps"``.
      method: the estimate used for the search.
      certify: the certified method of the final check (or None).
    """

    noise_multiplier: jax.Array
    sampling_prob: jax.Array
    num_steps: jax.Array
    epsilon_estimate: jax.Array
    epsilon_certified: jax.Array
    iterations: jax.Array
    status: jax.Array
    solved_for: str
    method: str
    certify: str | None

    @property
    def value(self):
        """The solved-for hyperparameter."""
        return getattr(self, self.solved_for)

    @property
    def message(self):
        """A sentence per status (a list for arrays)."""
        codes = np.asarray(self.status)

        def one(code):
            if int(code) == NOT_CERTIFIED:
                return f"the certified accountant ({self.certify}) could not confirm the budget"
            return _MESSAGES[(self.solved_for, int(code))]

        return one(codes) if codes.ndim == 0 else [one(c) for c in codes.ravel()]


# -- the pieces -----------------------------------------------------------------------------------


def _epsilon(mechanism, num_steps, delta, method):
    """Epsilon of the composition (pure, traceable); NaN (overflow) is read as +inf."""
    comp = to_f64(as_composition(mechanism, num_steps))
    eps = _accountant._epsilon_impl(comp, delta, method)
    return jnp.where(jnp.isnan(eps), jnp.inf, eps)


def _log_gap(eps, target):
    """``log eps - log target`` (``+inf`` for infinite eps, ``-inf`` for eps = 0)."""
    return jnp.log(jnp.maximum(eps, 0.0)) - jnp.log(target)


def _certify(eps_cert, x, target, max_x, nudge=CERTIFY_NUDGE):
    """The smallest ``x' >= x`` (to ``CERTIFY_XTOL``) whose certified epsilon is at most ``target``.

    ``x`` is a log parameter along which epsilon decreases.  The first evaluation is at
    ``x + nudge`` (usually enough: the certified slack is ~1e-6).  While the check fails, the
    step grows (1.5x the log-gap, at least doubling); once a passing point is known, the
    bracket ``[failing, passing]`` is narrowed by safeguarded secant steps on the log-gap.
    Only passing points are returned.  Returns ``(x', certified eps, evaluations, ok)``.
    """

    def gap(e):
        return jnp.where(jnp.isfinite(e), _log_gap(e, target), 1.0)

    def cond(state):
        i, a, _, b, _, have_b = state
        narrow = have_b & (b - a <= CERTIFY_XTOL)
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


def _implicit(x_star, g):
    """``x_star`` carrying the implicit derivative of the root of ``g``; also ``g(x_star)`` and ``g'``.

    One Newton step taken with gradients at the root: its derivative with respect to
    whatever ``g`` closes over is ``-(dg/dtheta) / g'`` (implicit function theorem), and
    its value moves ``x_star`` by at most the solver's tolerance.
    """
    x_star = jax.lax.stop_gradient(x_star)
    value, slope = jax.jvp(g, (x_star,), (jnp.ones_like(x_star),))
    slope = jax.lax.stop_gradient(slope)
    safe = jnp.isfinite(value) & jnp.isfinite(slope) & (slope != 0)
    step = jnp.where(safe, value / jnp.where(safe, slope, 1.0), 0.0)
    return x_star - step + jax.lax.stop_gradient(step), value, slope


# -- noise multiplier -----------------------------------------------------------------------------


def _psg_family(sigma, sampling_prob):
    return PoissonSubsampledGaussian(sigma, sampling_prob)


def _log_delta_gap(comp, target, log_delta, method):
    """``log(-log delta) - log(-log delta_method(target))``, decreasing in the noise.

    For a Gaussian-like law ``-log delta`` grows like ``sigma^2`` (and ``1 / q^2``), so
    this is nearly linear in ``log sigma`` and Newton converges in a few steps.  NaN
    (overflow at a tiny noise) is read as ``delta = 1``, i.e. ``+inf``.
    """
    if method is None:  # the Gaussian approximation with the same K(1): closed form, only a start
        ld = _exact.log_delta_gaussian(jnp.sqrt(jnp.maximum(comp.gaussian_mu2(), 1e-300)), target)
    else:
        ld = _accountant._log_delta_impl(comp, target, method)
    neg = -jnp.minimum(jnp.where(jnp.isnan(ld), 0.0, ld), 0.0)
    return jnp.log(-log_delta) - jnp.log(neg)


def _newton(g, lo, hi, x0, ftol, max_iterations=60):
    """Root of the decreasing ``g`` on ``[lo, hi]``: Newton, bisection when a step leaves the bracket.

    Stops when ``|g| <= ftol`` (here ``g`` is a log of ``-log delta``: ``ftol`` is a relative
    accuracy of ``log delta``) or the bracket is below 1e-13.  Returns ``(x, iterations)``.
    """

    def cond(state):
        i, _, a, b, done = state
        return (i < max_iterations) & ~done & (b - a > 1e-13 * (1.0 + jnp.abs(a)))

    def body(state):
        i, x, a, b, _ = state
        gx, dg = jax.jvp(g, (x,), (jnp.ones_like(x),))
        a = jnp.where(gx > 0, x, a)
        b = jnp.where(gx > 0, b, x)
        newton = x - gx / dg
        ok = jnp.isfinite(newton) & (newton > a) & (newton < b)
        x_new = jnp.where(ok, newton, 0.5 * (a + b))
        done = jnp.abs(gx) <= ftol
        return i + 1, jnp.where(done, x, x_new), a, b, done

    x0 = jnp.clip(x0, lo, hi)
    i, x, _, _, _ = jax.lax.while_loop(cond, body, (0, x0, jnp.asarray(lo, x0.dtype), jnp.asarray(hi, x0.dtype), False))
    return x, i


def _solve(h, params, lo, hi, method):
    """Root of the decreasing ``h(u, name, params)`` on ``[lo, hi]``: a start from the Gaussian approximation
    refined on the saddle-point estimate (both cheap), then safeguarded Newton on ``method``, then
    the implicit-derivative step.

    Returns ``(u, h(u), dh/du, iterations, below, above)``; ``below`` / ``above`` flag a
    root outside the bracket (``h(lo) < 0`` or ``h(hi) > 0``).
    """

    frozen_params = jax.lax.stop_gradient(params)  # the loops see constants (no reverse mode through them)

    def frozen(name):
        return lambda u: h(u, name, frozen_params)

    u0, i0 = _newton(frozen(None), lo, hi, 0.5 * (lo + hi), 1e-6)
    u0, i0b = _newton(frozen("saddlepoint"), lo, hi, u0, 1e-9)
    u_star, i1 = _newton(frozen(method), lo, hi, u0, 1e-10)
    u, value, slope = _implicit(u_star, lambda v: h(v, method, params))
    edge = 1e-9 * (1.0 + jnp.abs(hi - lo))
    below = (u_star <= lo + edge) & (jax.lax.stop_gradient(value) < 0)
    above = (u_star >= hi - edge) & (jax.lax.stop_gradient(value) > 0)
    return u, value, slope, i0 + i0b + i1, below, above


def _noise_core(family, target, delta, num_steps, sampling_prob, sigma_max, method, certify):
    log_delta = jnp.log(delta)

    def h(u, name, p):  # decreasing in u = log sigma
        t, ld, n, q = p
        return _log_delta_gap(to_f64(as_composition(family(jnp.exp(u), q), n)), t, ld, name)

    lo, hi = math.log(SIGMA_MIN), jnp.log(sigma_max)
    params = (target, log_delta, num_steps, sampling_prob)
    u, _, _, iters, at_min, infeasible = _solve(h, params, lo, hi, method)
    u = jnp.where(at_min, lo, u)
    u_sg = jax.lax.stop_gradient(u)

    def eps(x, name):
        return _epsilon(family(jnp.exp(x), sampling_prob), num_steps, delta, name)

    if certify is None:
        u_c, eps_c, rounds, ok = u, jnp.nan, 0, jnp.asarray(True)
    else:
        # d log eps / d log sigma from the estimate's delta slope: d log eps = -(dh/du) / (dh/d eps) du;
        # a rough slope suffices (the steps are safeguarded), so use the Gaussian relation |slope| ~ 1
        nudge = jnp.where(at_min, 0.0, CERTIFY_NUDGE)
        x_c, eps_c, rounds, ok = _certify(lambda x: eps(x, certify), u_sg, target, hi, nudge)
        u_c = u + jax.lax.stop_gradient(x_c - u)  # the certification shift is a constant for gradients
    eps_e = eps(jax.lax.stop_gradient(u_c), method)
    status = jnp.where(infeasible, INFEASIBLE, jnp.where(~ok, NOT_CERTIFIED, jnp.where(at_min, AT_LIMIT, OK)))
    sigma = jnp.where(infeasible, jnp.nan, jnp.exp(u_c))
    return sigma, eps_e, eps_c, iters + rounds, status


@float64_scope
def calibrate_noise_multiplier(
    *,
    target_epsilon,
    delta,
    num_steps,
    sampling_prob=None,
    mechanism: Callable | None = None,
    method: str = "characteristic",
    certify: str | None = "certified",
    sigma_max=100.0,
) -> CalibrationResult:
    """Smallest noise multiplier whose epsilon (at ``delta``) is at most ``target_epsilon``.

    Args:
      target_epsilon: the budget, ``> 0``.
      delta: in ``(0, 1)``.
      num_steps: a whole number ``>= 1`` (how often the mechanism is applied).
      sampling_prob: Poisson sampling rate in ``(0, 1]`` of the subsampled Gaussian
        (give this or ``mechanism``).
      mechanism: instead, a function ``sigma -> mechanism`` for other families:
        a group mixture, a heterogeneous :class:`~jaxdp.Composition` whose noise
        scales with ``sigma``.  Pass the same function object each time (it is
        part of the compilation key).
      method: the estimate that drives the search (any ``method=`` name).
      certify: the certified accountant of the final check (``"certified"``;
        ``"saddlepoint-certified"`` or ``"rdp"`` are looser), or None to skip it.
      sigma_max: the largest noise multiplier searched.

    ``target_epsilon``, ``delta``, ``sampling_prob`` and ``num_steps`` may be arrays
    (broadcast together, one compiled vectorised call) or traced.

    Returns:
      A :class:`CalibrationResult` (``.noise_multiplier`` is the answer).

    Raises:
      ValueError: for out-of-range concrete arguments, or (for scalar concrete
        inputs) when even ``sigma_max`` does not meet the budget.

    Formal Guarantees:
      With ``certify`` a certified method and ``status`` 0 or 2, the certified
      epsilon at the returned noise multiplier is at most ``target_epsilon``.

    Example:
      >>> import jaxdp
      >>> r = jaxdp.calibrate_noise_multiplier(target_epsilon=8.0, delta=1e-5, sampling_prob=0.01,
      ...                                      num_steps=2000)
      >>> round(float(r.noise_multiplier), 3), float(r.epsilon_certified) <= 8.0
      (0.643, True)
    """
    _validate.positive("target_epsilon", target_epsilon)
    _validate.open_unit("delta", delta)
    _validate.num_steps("num_steps", num_steps)
    _validate.positive("sigma_max", sigma_max)
    if (sampling_prob is None) == (mechanism is None):
        raise ValueError("give exactly one of sampling_prob (Poisson-subsampled Gaussian) or mechanism.")
    if sampling_prob is not None:
        _validate.probability("sampling_prob", sampling_prob)
    info = _accountant.method_info(method)
    cert = None if certify is None else _certified_name(certify)
    q = 1.0 if sampling_prob is None else sampling_prob
    args = jnp.broadcast_arrays(*(jnp.asarray(a, jnp.float64) for a in (target_epsilon, delta, q, num_steps)))
    shape = args[0].shape
    flat = [a.reshape(-1) for a in args]
    sigma, eps_e, eps_c, iters, status = _noise_jit(*flat, sigma_max, mechanism, info.name, cert)
    result = CalibrationResult(
        sigma.reshape(shape),
        jnp.nan if sampling_prob is None else args[2],
        args[3],
        eps_e.reshape(shape),
        eps_c.reshape(shape),
        iters.reshape(shape),
        status.reshape(shape),
        "noise_multiplier",
        info.name,
        cert,
    )
    _raise_if_infeasible(result)
    return result


def _noise_batch(target, delta, q, steps, sigma_max, mechanism, method, certify):
    def one(t, d, qq, n):
        family = _psg_family if mechanism is None else (lambda sigma, _: mechanism(sigma))
        return _noise_core(family, t, d, n, qq, jnp.asarray(sigma_max, jnp.float64), method, certify)

    return jax.lax.map(lambda a: one(*a), (target, delta, q, steps))


_noise_jit = jax.jit(_noise_batch, static_argnames=("mechanism", "method", "certify"))


def _certified_name(certify):
    info = _accountant.method_info(certify)
    if not info.certified:
        raise ValueError(f"certify must name a certified method (e.g. 'certified'), got {certify!r}.")
    return info.name


def _raise_if_infeasible(result):
    status = result.status
    if _validate.is_concrete(status) and np.ndim(status) == 0 and int(status) == INFEASIBLE:
        raise ValueError(f"cannot calibrate {result.solved_for}: {result.message}.")


# -- sampling probability -------------------------------------------------------------------------


def _q_core(target, delta, sigma, num_steps, method, certify):
    log_delta = jnp.log(delta)

    def h(u, name, p):  # decreasing in u = -log q
        t, ld, n, s = p
        return _log_delta_gap(to_f64(as_composition(PoissonSubsampledGaussian(s, jnp.exp(-u)), n)), t, ld, name)

    lo, hi = 0.0, -math.log(SAMPLING_PROB_MIN)
    params = (target, log_delta, num_steps, sigma)
    u, _, _, iters, fits_at_one, infeasible = _solve(h, params, lo, hi, method)
    u = jnp.where(fits_at_one, lo, u)
    u_sg = jax.lax.stop_gradient(u)

    def eps(x, name):
        return _epsilon(PoissonSubsampledGaussian(sigma, jnp.exp(-x)), num_steps, delta, name)

    if certify is None:
        u_c, eps_c, rounds, ok = u, jnp.nan, 0, jnp.asarray(True)
    else:
        nudge = jnp.where(fits_at_one, 0.0, CERTIFY_NUDGE)  # q = 1 is checked as it is
        x_c, eps_c, rounds, ok = _certify(lambda x: eps(x, certify), u_sg, target, hi, nudge)
        u_c = u + jax.lax.stop_gradient(x_c - u)
    eps_e = eps(jax.lax.stop_gradient(u_c), method)
    status = jnp.where(infeasible, INFEASIBLE, jnp.where(~ok, NOT_CERTIFIED, jnp.where(fits_at_one, AT_LIMIT, OK)))
    q = jnp.where(infeasible, jnp.nan, jnp.exp(-u_c))
    return q, eps_e, eps_c, iters + rounds, status


@float64_scope
def calibrate_sampling_prob(
    *,
    target_epsilon,
    delta,
    noise_multiplier,
    num_steps,
    method: str = "characteristic",
    certify: str | None = "certified",
) -> CalibrationResult:
    """Largest Poisson sampling rate whose epsilon (at ``delta``) is at most ``target_epsilon``.

    Args:
      target_epsilon: the budget, ``> 0``.
      delta: in ``(0, 1)``.
      noise_multiplier: ``> 0``.
      num_steps: a whole number ``>= 1``.
      method: the estimate that drives the search.
      certify: the certified accountant of the final check, or None.

    Returns:
      A :class:`CalibrationResult` (``.sampling_prob`` is the answer; status 2
      when ``q = 1`` already meets the budget).

    Raises:
      ValueError: for out-of-range concrete arguments, or (scalar concrete
        inputs) when even ``q = 1e-9`` exceeds the budget.

    Formal Guarantees:
      With ``certify`` a certified method and ``status`` 0 or 2, the certified
      epsilon at the returned rate is at most ``target_epsilon``.

    Example:
      >>> import jaxdp
      >>> r = jaxdp.calibrate_sampling_prob(target_epsilon=8.0, delta=1e-5, noise_multiplier=0.6434,
      ...                                   num_steps=2000)
      >>> round(float(r.sampling_prob), 4), float(r.epsilon_certified) <= 8.0
      (0.01, True)
    """
    _validate.positive("target_epsilon", target_epsilon)
    _validate.open_unit("delta", delta)
    _validate.positive("noise_multiplier", noise_multiplier)
    _validate.num_steps("num_steps", num_steps)
    info = _accountant.method_info(method)
    cert = None if certify is None else _certified_name(certify)
    args = jnp.broadcast_arrays(
        *(jnp.asarray(a, jnp.float64) for a in (target_epsilon, delta, noise_multiplier, num_steps))
    )
    shape = args[0].shape
    q, eps_e, eps_c, iters, status = _q_jit(*(a.reshape(-1) for a in args), info.name, cert)
    result = CalibrationResult(
        args[2],
        q.reshape(shape),
        args[3],
        eps_e.reshape(shape),
        eps_c.reshape(shape),
        iters.reshape(shape),
        status.reshape(shape),
        "sampling_prob",
        info.name,
        cert,
    )
    _raise_if_infeasible(result)
    return result


def _q_batch(target, delta, sigma, steps, method, certify):
    args = (target, delta, sigma, steps)
    return jax.lax.map(lambda a: _q_core(*a, method, certify), args)


_q_jit = jax.jit(_q_batch, static_argnames=("method", "certify"))


# -- number of steps ------------------------------------------------------------------------------


def _steps_core(target, delta, sigma, q, max_steps, method, certify):
    mech = PoissonSubsampledGaussian(sigma, q)
    log_delta = jnp.log(delta)

    def h(u, name, p):  # decreasing in u = log steps
        t, ld, s, qq = p
        comp = to_f64(as_composition(PoissonSubsampledGaussian(s, qq), jnp.exp(u)))
        return -_log_delta_gap(comp, t, ld, name)

    lo, hi = 0.0, jnp.log(max_steps)
    params = (target, log_delta, sigma, q)
    u, _, _, iters, infeasible, at_max = _solve(h, params, lo, hi, method)
    u = jax.lax.stop_gradient(u)  # an integer answer: no gradient
    n = jnp.where(at_max, max_steps, jnp.maximum(jnp.floor(jnp.exp(u) * (1 + 1e-12)), 1.0))

    def eps(m, name):
        return _epsilon(mech, m, delta, name)

    if certify is None:
        eps_c, rounds, ok = jnp.nan, 0, jnp.asarray(True)
    else:
        # step down until the certified epsilon fits: floor(n) first, then by the measured gap
        # (eps grows at least like sqrt(steps) in this regime, so the step is 1.5 x 2 x gap x n)

        def cond(state):
            i, m, e = state
            return (i < CERTIFY_ROUNDS) & ~(e <= target) & (m >= 1)

        def body(state):
            i, m, e = state
            gap = jnp.where(jnp.isfinite(e), _log_gap(e, target), 1.0)
            down = jnp.where(i == 0, 0.0, jnp.maximum(1.0, jnp.ceil(m * (1.0 - jnp.exp(-3.0 * gap)))))
            m_new = m - down
            return i + 1, m_new, eps(jnp.maximum(m_new, 1.0), certify)

        rounds, n, eps_c = jax.lax.while_loop(cond, body, (0, n, jnp.asarray(jnp.inf, jnp.float64)))
        ok = eps_c <= target
        infeasible = infeasible | (n < 1)
    eps_e = eps(jnp.maximum(n, 1.0), method)
    status = jnp.where(infeasible, INFEASIBLE, jnp.where(~ok, NOT_CERTIFIED, jnp.where(at_max, AT_LIMIT, OK)))
    n = jnp.where(infeasible, jnp.nan, n)
    return n, eps_e, eps_c, iters + rounds, status


@float64_scope
def calibrate_num_steps(
    *,
    target_epsilon,
    delta,
    noise_multiplier,
    sampling_prob,
    max_steps=10**7,
    method: str = "characteristic",
    certify: str | None = "certified",
) -> CalibrationResult:
    """Largest whole number of steps whose epsilon (at ``delta``) is at most ``target_epsilon``.

    Args:
      target_epsilon: the budget, ``> 0``.
      delta: in ``(0, 1)``.
      noise_multiplier: ``> 0``.
      sampling_prob: in ``(0, 1]``.
      max_steps: the largest number of steps searched (status 2 when it fits).
      method: the estimate that drives the search.
      certify: the certified accountant of the final check, or None.

    Returns:
      A :class:`CalibrationResult` (``.num_steps`` is the answer, a whole number).

    Raises:
      ValueError: for out-of-range concrete arguments, or (scalar concrete
        inputs) when even one step exceeds the budget.

    Formal Guarantees:
      With ``certify`` a certified method and ``status`` 0 or 2, the certified
      epsilon after the returned number of steps is at most ``target_epsilon``.

    Example:
      >>> import jaxdp
      >>> r = jaxdp.calibrate_num_steps(target_epsilon=8.0, delta=1e-5, noise_multiplier=0.6434,
      ...                               sampling_prob=0.01)
      >>> int(r.num_steps) in range(1990, 2010), float(r.epsilon_certified) <= 8.0
      (True, True)
    """
    _validate.positive("target_epsilon", target_epsilon)
    _validate.open_unit("delta", delta)
    _validate.positive("noise_multiplier", noise_multiplier)
    _validate.probability("sampling_prob", sampling_prob)
    _validate.num_steps("max_steps", max_steps)
    info = _accountant.method_info(method)
    cert = None if certify is None else _certified_name(certify)
    args = jnp.broadcast_arrays(
        *(jnp.asarray(a, jnp.float64) for a in (target_epsilon, delta, noise_multiplier, sampling_prob, max_steps))
    )
    shape = args[0].shape
    n, eps_e, eps_c, iters, status = _steps_jit(*(a.reshape(-1) for a in args), info.name, cert)
    result = CalibrationResult(
        args[2],
        args[3],
        n.reshape(shape),
        eps_e.reshape(shape),
        eps_c.reshape(shape),
        iters.reshape(shape),
        status.reshape(shape),
        "num_steps",
        info.name,
        cert,
    )
    _raise_if_infeasible(result)
    return result


def _steps_batch(target, delta, sigma, q, max_steps, method, certify):
    args = (target, delta, sigma, q, max_steps)
    return jax.lax.map(lambda a: _steps_core(*a, method, certify), args)


_steps_jit = jax.jit(_steps_batch, static_argnames=("method", "certify"))


# -- a user objective over (sigma, q, steps) ------------------------------------------------------


class TradeoffResult(NamedTuple):
    """The outcome of :func:`calibrate`.

    Attributes:
      calibration: the final :class:`CalibrationResult` (sigma for the chosen q and whole steps,
        checked by ``certify``).
      objective: the objective at the final (sigma, q, steps).
      history: the objective along the optimisation (continuous steps, estimate-calibrated sigma);
        it stops early where the value or its gradient is not finite, and the best point is kept.
    """

    calibration: CalibrationResult
    objective: float
    history: np.ndarray


def _between(z, lo, hi):
    """``lo (hi / lo)^sigmoid(z)``: any real ``z`` to ``(lo, hi)``, geometrically."""
    return jnp.exp(jnp.log(lo) + jax.nn.sigmoid(z) * (jnp.log(hi) - jnp.log(lo)))


def _logit_of(x, lo, hi):
    u = (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo))
    u = min(max(u, 1e-6), 1 - 1e-6)
    return math.log(u / (1 - u))


@float64_scope
def calibrate(
    objective: Callable,
    *,
    target_epsilon,
    delta,
    sampling_prob,
    num_steps,
    optimizer=None,
    iterations: int = 100,
    q_range=(1e-4, 1.0),
    steps_range=(1.0, 1e6),
    method: str = "saddlepoint",
    certify: str | None = "certified",
) -> TradeoffResult:
    """Minimises ``objective(sigma, q, steps)`` over ``(q, steps)`` with ``sigma`` calibrated to the budget.

    For every ``(q, steps)`` the noise multiplier is the smallest that meets
    ``eps <= target_epsilon`` at ``delta`` (by the estimate ``method``); its implicit
    gradients make ``objective`` a differentiable function of ``(q, steps)``, which an
    optax optimiser (default ``optax.adam(0.05)``) minimises over ``log q`` and
    ``log steps`` (kept inside ``q_range`` and ``steps_range``).  The answer is then
    rounded to whole steps and calibrated again with the ``certify`` check, so the
    returned configuration never exceeds the budget.

    Args:
      objective: ``(sigma, q, steps) -> scalar`` (JAX-traceable; steps continuous).
      target_epsilon, delta: the budget.
      sampling_prob, num_steps: the starting point.
      optimizer: an ``optax.GradientTransformation``.
      iterations: optimiser steps.
      q_range, steps_range: the search box.
      method: the estimate used while optimising (the final calibration uses ``characteristic``).
      certify: the certified accountant of the final check.

    Returns:
      A :class:`TradeoffResult`.

    Example:
      >>> import jaxdp
      >>> # noise of the averaged gradient, per step, plus a price on compute (epochs of 50,000 examples)
      >>> f = lambda s, q, t: (s / (q * 50_000)) ** 2 / t + 1e-9 * q * t
      >>> r = jaxdp.calibrate(f, target_epsilon=4.0, delta=1e-5, sampling_prob=0.01, num_steps=1000,
      ...                     iterations=30)  # doctest: +SKIP
      >>> float(r.calibration.epsilon_certified) <= 4.0, r.objective < float(r.history[0])  # doctest: +SKIP
      (True, True)

      (Skipped in the default test run for its compile time; ``tests/test_calibrate.py`` runs it, marked slow,
      and ``examples/calibrate_tradeoff.py`` is a complete script.)
    """
    import optax

    _validate.positive("target_epsilon", target_epsilon)
    _validate.open_unit("delta", delta)
    _validate.probability("sampling_prob", sampling_prob)
    _validate.num_steps("num_steps", num_steps)
    q_lo, q_hi = (float(v) for v in q_range)
    n_lo, n_hi = (float(v) for v in steps_range)
    if not (0 < q_lo < q_hi <= 1) or not (1 <= n_lo < n_hi):
        raise ValueError("q_range must satisfy 0 < lo < hi <= 1 and steps_range 1 <= lo < hi.")
    opt = optax.adam(0.05) if optimizer is None else optimizer

    def loss(z):
        q = _between(z[0], q_lo, q_hi)
        n = _between(z[1], n_lo, n_hi)
        sigma = calibrate_noise_multiplier(
            target_epsilon=target_epsilon, delta=delta, sampling_prob=q, num_steps=n, method=method, certify=None
        ).noise_multiplier
        return objective(sigma, q, n)

    step = jax.jit(jax.value_and_grad(loss))
    z = jnp.array([_logit_of(float(sampling_prob), q_lo, q_hi), _logit_of(float(num_steps), n_lo, n_hi)])
    state = opt.init(z)
    history = []
    best_value, best_z = math.inf, z
    for _ in range(int(iterations)):
        value, grad = step(z)
        if not (np.isfinite(float(value)) and bool(jnp.all(jnp.isfinite(grad)))):
            break  # outside the region the estimate covers: keep the best point so far
        history.append(float(value))
        if float(value) < best_value:
            best_value, best_z = float(value), z
        updates, state = opt.update(grad, state, z)
        z = optax.apply_updates(z, updates)
    q = float(_between(best_z[0], q_lo, q_hi))
    n = float(max(1.0, round(float(_between(best_z[1], n_lo, n_hi)))))
    final = calibrate_noise_multiplier(  # the accurate estimate for the final answer
        target_epsilon=target_epsilon, delta=delta, sampling_prob=q, num_steps=n, certify=certify
    )
    value = float(objective(final.noise_multiplier, jnp.float64(q), jnp.float64(n)))
    return TradeoffResult(final, value, np.asarray(history))
