"""Calibration: the noise multiplier, sampling probability or number of steps for a budget.

Each calibration is two solves:

1. **Search** with a fast *estimate* (``method``, by default the characteristic-function
   accountant, ~1e-6 relative) for the parameter whose estimated epsilon is the target.
2. **Never overshoot**: the answer is checked with a *certified* accountant
   (``certify``, by default ``"certified-fast"``: the certified construction on a
   coarser lattice, a proven bound) and moved, by the least amount the measured
   slack calls for, until the certified epsilon is at most the target.  The
   parameter is first moved by the certified method's ``calibration_nudge`` (about the check's slack), so
   that one certified evaluation usually suffices.  The number of steps is the largest whole count
   that passes, between a passing and a failing count (usually the estimate's count and the next).

Concrete inputs (up to ``HOST_CONFIGURATIONS``) run both on the host, over the accountants'
per-query programs (a secant search started from the Gaussian pair, :func:`_host_one`): a first
calibration compiles what a first query of each method compiles.  Traced inputs (and larger arrays)
run one program: a safeguarded Newton iteration on the estimate with its own derivative
(:func:`_solve`), then the same check as a ``while_loop``.

Gradients of the calibrated value with respect to the target epsilon, delta
and the fixed hyperparameters are implicit (implicit function theorem on the
estimate's equation ``eps_est(x) = target``, as a custom JVP: free unless asked
for); the certification shift is held constant.  Every function accepts arrays
(broadcast together; traced ones run in one compiled ``lax.map``); the functions
can also be ``jax.vmap``-ped or ``jax.jit``-ted.

The method in full: ``docs/calibration.md``.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import accountants as _accountant
from jaxdp.mechanisms import PoissonSubsampledGaussian, as_composition
from jaxdp.numerics import (
    DOWN,
    NEAREST,
    UP,
    float64_entry,
    float64_scope,
    implicit_root,
    nan_to,
    program_cache,
    pytree_dataclass,
    safeguarded_newton,
    to_f64,
    with_slope,
)
from jaxdp.numerics import validate as _validate

__all__ = [
    "CalibrationResult",
    "TradeoffResult",
    "calibrate",
    "calibrate_noise_multiplier",
    "calibrate_num_steps",
    "calibrate_sampling_prob",
]

METHOD_XTOL = 3e-4  # the estimate's Newton stops once its step (in log parameter) is below this
HOST_XTOL = 1e-6  # the host search's secant stops once its step (in log parameter) is below this
#   (the step is taken: the secant's error after it is of the order of this step times the one before)
HOST_EVALUATIONS = 60  # the host search's evaluations at most (about four, usually)
#: concrete inputs with at most this many configurations are calibrated on the host, over the accountants' per-query
#: programs (no compile of the calibration's own, for a few more dispatches per configuration); larger concrete arrays
#: run the compiled search (``lax.map``, kept on disk by ``program_cache``), whose compile a sweep amortises
HOST_CONFIGURATIONS = 16
LINEAR_REACH = 1e-3  # the reported estimate is linearised from the search up to this (log) distance
CERTIFY_ROUNDS = 12  # certified evaluations at most (one, usually)
CERTIFY_XTOL = 2e-5  # the check stops within this (log-parameter) distance of the last failing point
SIGMA_MIN = 0.05  # search bracket of the noise multiplier (below: every accountant overflows)
SAMPLING_PROB_MIN = 1e-9


class Status(enum.IntEnum):
    """``CalibrationResult.status`` (an integer array, comparable with these)."""

    OK = 0
    INFEASIBLE = 1  # no value in the allowed range meets the budget
    AT_LIMIT = 2  # the budget is met at the edge of the range (q = 1, steps = max_steps, sigma = SIGMA_MIN)
    NOT_CERTIFIED = 3  # the certified accountant could not confirm the budget within CERTIFY_ROUNDS


OK, INFEASIBLE, AT_LIMIT, NOT_CERTIFIED = Status.OK, Status.INFEASIBLE, Status.AT_LIMIT, Status.NOT_CERTIFIED

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


def _rounding(result: CalibrationResult) -> CalibrationResult:
    """Float32 rounding of a result traced with x64 off: sigma up, q and steps down, the certified epsilon up."""
    return dataclasses.replace(
        result,
        noise_multiplier=UP,
        sampling_prob=DOWN,
        num_steps=DOWN,
        epsilon_estimate=NEAREST,
        epsilon_certified=UP,
        iterations=NEAREST,
        status=NEAREST,
    )


# -- the pieces -----------------------------------------------------------------------------------

#: ``certify=EVR``: estimate-verify-release by the Monte Carlo verifier instead of a certified accountant
EVR = "evr"


def _no_evr_options(key):
    if key is not None:
        raise ValueError("key applies to certify='evr' only.")


def _evr_calibration(calibrator, kwargs, key, tau, mech_of):
    """``certify="evr"``: the estimate calibrated below what the verifier must accept, then verified."""
    if key is None:
        raise ValueError("certify='evr' needs a PRNG key: key=jax.random.key(seed).")
    scalars = {k: v for k, v in kwargs.items() if k not in ("mechanism", "method")}
    if not all(_validate.is_concrete(v) and np.ndim(v) == 0 for v in scalars.values() if v is not None):
        raise ValueError("certify='evr' needs concrete scalar inputs (the verifier runs eagerly).")
    tau = float(tau)
    if not 0.0 < tau < 1.0:
        raise ValueError(f"tau must lie in (0, 1), got {tau!r}.")
    rho = (1.0 + tau) / 2.0
    delta = float(kwargs["delta"])
    delta_est = tau * delta
    estimate = calibrator(**{**kwargs, "delta": 0.9 * delta_est / rho}, certify=None)
    if int(estimate.status) == INFEASIBLE or not np.isfinite(float(estimate.value)):
        return dataclasses.replace(estimate, certify=EVR)
    mech, steps = mech_of(estimate)
    target = float(kwargs["target_epsilon"])
    verdict = _accountant.evr(mech, num_steps=steps, epsilon=target, delta_est=delta_est, tau=tau, key=key)
    accepted = bool(verdict.accepted)
    eps_est = _accountant.epsilon_for_delta(mech, delta=delta, num_steps=steps, method=estimate.method)
    status = int(estimate.status) if accepted else NOT_CERTIFIED
    return dataclasses.replace(
        estimate,
        epsilon_estimate=jnp.asarray(eps_est, jnp.float64),
        epsilon_certified=jnp.asarray(target if accepted else jnp.nan, jnp.float64),
        status=jnp.asarray(status, estimate.status.dtype),
        certify=EVR,
    )


def _epsilon(mechanism, num_steps, delta, method):
    """Epsilon of the composition (pure, traceable); NaN (overflow) is read as +inf."""
    comp = to_f64(as_composition(mechanism, num_steps))
    eps = _accountant.epsilon_of_composition(comp, delta, method)
    return nan_to(eps, jnp.inf)


def _log_gap(eps, target):
    """``log eps - log target`` (``+inf`` for infinite eps, ``-inf`` for eps = 0)."""
    return jnp.log(jnp.maximum(eps, 0.0)) - jnp.log(target)


def _nudge(certify):
    """The certified method's first move, relative: about its slack (:attr:`MethodInfo.calibration_nudge`)."""
    return _accountant.method_info(certify).calibration_nudge


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
        ld = _accountant.log_delta_gaussian(jnp.sqrt(jnp.maximum(comp.gaussian_mu2(), 1e-300)), target)
    else:
        ld = _accountant.log_delta_of_composition(comp, target, method)
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
    u0, i0b, _ = safeguarded_newton(with_slope(frozen("saddlepoint-delta2")), lo, hi, u0, 1e-9)
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


def _status(infeasible, ok, at_limit):
    return jnp.where(infeasible, INFEASIBLE, jnp.where(~ok, NOT_CERTIFIED, jnp.where(at_limit, AT_LIMIT, OK)))


def _run(solved_for, batch, inputs, method, certify, **static):
    """Validated inputs -> broadcast, flattened -> the host's calibration (concrete, at most ``HOST_CONFIGURATIONS``)
    or one compiled ``lax.map`` (traced, or more configurations) -> :class:`CalibrationResult`.

    ``inputs`` maps names to values in the order ``batch`` takes them (``target_epsilon`` and
    ``delta`` first, then the fixed hyperparameters); the result's other hyperparameters come
    from it (NaN when absent).
    """
    info = _accountant.method_info(method)
    cert = None if certify is None else _certified_name(certify)
    arrays = jnp.broadcast_arrays(*(jnp.asarray(v, jnp.float64) for v in inputs.values()))
    shape = arrays[0].shape
    flat = tuple(a.reshape(-1) for a in arrays)
    if _validate.is_concrete(flat) and flat[0].size <= HOST_CONFIGURATIONS:
        value, eps_e, eps_c, iters, status = _host_calibration(solved_for, flat, info.name, cert, **static)
    else:
        value, eps_e, eps_c, iters, status = _run_batch(batch, flat, method=info.name, certify=cert, **static)
    known = dict(zip(inputs, arrays))
    known[solved_for] = value.reshape(shape)
    nan = jnp.asarray(jnp.nan, jnp.float64)
    result = CalibrationResult(
        known.get("noise_multiplier", nan),
        known.get("sampling_prob", nan),
        known.get("num_steps", nan),
        eps_e.reshape(shape),
        eps_c.reshape(shape),
        iters.reshape(shape),
        status.reshape(shape),
        solved_for,
        info.name,
        cert,
    )
    status = result.status
    if _validate.is_concrete(status) and np.ndim(status) == 0 and int(status) == INFEASIBLE:
        raise ValueError(f"cannot calibrate {solved_for}: {result.message}.")
    return result


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


def _certified_name(certify):  # (certify="evr" is handled before, by _evr_calibration)
    info = _accountant.method_info(certify)
    if not info.certified:
        raise ValueError(f"certify must name a certified method (e.g. 'certified'), got {certify!r}.")
    return info.name


# -- host-staged calibration (concrete inputs) -----------------------------------------------------

def _host_calibration(solved_for, flat, method, certify, mechanism=None):
    """A calibration of concrete inputs on the host, one configuration at a time: the estimate's search and the
    certification are host-side iterations over the accountants' own per-query programs (``epsilon_for_delta``'s,
    compiled once per process and kept on disk by ``program_cache``), so a first calibration compiles what a
    first query of each method compiles, and nothing else (the compiled search, :func:`_batch`, is a program of
    its own: worth its compile for many configurations only)."""
    inputs = [np.asarray(a, np.float64) for a in flat]
    rows = [_host_one(solved_for, [float(a[i]) for a in inputs], method, certify, mechanism)
            for i in range(len(inputs[0]))]
    return tuple(jnp.asarray(np.array(col), dt) for col, dt in zip(zip(*rows), (jnp.float64,) * 3 + (jnp.int64,) * 2))


def _host_one(solved_for, args, method, certify, mechanism):
    """One configuration: ``(value, estimate's epsilon, certified epsilon, evaluations, status)``."""
    target, delta = args[0], args[1]
    mu2 = _gaussian_mu(target, delta) ** 2  # the Gaussian pair's: the searches start from it
    known = {}

    def epsilon(x, name):  # (x: the log parameter, or the count; each evaluation once)
        if (x, name) not in known:
            mech, num_steps = mechanism_at(x)
            eps = _accountant.epsilon_of_concrete(mech, num_steps=num_steps, delta=delta, method=name)
            known[x, name] = math.inf if math.isnan(eps) else eps
        return known[x, name]

    if solved_for == "num_steps":
        sigma, q, max_steps = args[2], args[3], args[4]

        def mechanism_at(m):
            return PoissonSubsampledGaussian(sigma, q), m

        k1 = _gaussian_mu2_of(PoissonSubsampledGaussian(sigma, q), 1.0)
        ratio = mu2 / k1 if k1 > 0 else math.inf  # (K(1) rounds to 0 or below for tiny q / sigma: start at the top)
        n0 = min(max(math.floor(ratio), 1.0), max_steps) if math.isfinite(ratio) else max_steps
        n, _, evals, found = _host_largest_count(lambda m: epsilon(m, method), n0, target, max_steps,
                                                 rounds=HOST_EVALUATIONS)
        if not found:  # even one step exceeds the budget
            return math.nan, epsilon(1.0, method), math.nan, evals, int(INFEASIBLE)
        if certify is None:
            return n, epsilon(n, method), math.nan, evals, _host_status(False, True, n >= max_steps)
        count, eps_c, rounds, ok = _host_largest_count(lambda m: epsilon(m, certify), n, target, max_steps)
        infeasible = count < 1
        value = math.nan if infeasible else count
        eps_e = epsilon(max(count, 1.0), method)
        return value, eps_e, eps_c, evals + rounds, _host_status(infeasible, ok, ok and count >= max_steps)

    if solved_for == "noise_multiplier":
        q, num_steps = args[2], args[3]
        family = mechanism or (lambda s: _psg_family(s, q))
        lo, hi = math.log(SIGMA_MIN), math.log(args[4])  # x = log sigma

        def mechanism_at(x):
            return family(math.exp(x)), num_steps

    else:  # sampling_prob
        sigma, num_steps = args[2], args[3]
        lo, hi = 0.0, -math.log(SAMPLING_PROB_MIN)  # x = -log q

        def mechanism_at(x):
            return PoissonSubsampledGaussian(sigma, math.exp(-x)), num_steps

    def log_mu2(x):
        mech, num_steps = mechanism_at(x)
        return math.log(max(_gaussian_mu2_of(mech, num_steps), 1e-300))

    # the start: the Gaussian pair with the composition's K(1) (one small program), to 1e-3, and the slope of that
    # model's log epsilon there (the estimate's first step; then secant steps on the estimate itself)
    x0, evals0, _, _ = _host_root(lambda x: log_mu2(x) - math.log(mu2), lo, hi, 0.5 * (lo + hi), slope=-2.0,
                                  xtol=1e-3)
    ends = (max(x0 - 1e-3, lo), min(x0 + 1e-3, hi))
    model = [math.log(max(_gaussian_epsilon(math.exp(0.5 * log_mu2(x)), delta), 1e-300)) for x in ends]
    slope = (model[1] - model[0]) / (ends[1] - ends[0]) if ends[1] > ends[0] else math.nan
    x, evals, below, above = _host_root(lambda v: _host_gap(epsilon(v, method), target), lo, hi, x0,
                                        slope=slope if math.isfinite(slope) and slope < 0 else -1.0, xtol=HOST_XTOL)
    evals += evals0
    if above:  # even the largest noise (the smallest rate) exceeds the budget
        return math.nan, epsilon(hi, method), math.nan, evals, int(INFEASIBLE)
    if certify is None:
        x_c, eps_c, rounds, ok = x, math.nan, 0, True
    else:
        nudge = 0.0 if below else _nudge(certify)  # a value at the edge is checked as it is
        x_c, eps_c, rounds, ok = _host_certify(lambda v: epsilon(v, certify), x, target, hi, nudge)
    value = math.exp(x_c) if solved_for == "noise_multiplier" else math.exp(-x_c)
    return value, _host_estimate_at(x_c, known, method, epsilon), eps_c, evals + rounds, _host_status(False, ok, below)


def _host_estimate_at(x, known, method, epsilon):
    """The estimate's epsilon at ``x``: interpolated (linearly in ``log eps``) between the search's two evaluations
    nearest to it where both lie within ``LINEAR_REACH`` (the error is of the order of the product of the
    distances, ~1e-8 relative after the certification's shift), else evaluated."""
    near = sorted((abs(v - x), v, e) for (v, name), e in known.items() if name == method and 0.0 < e < math.inf)
    if len(near) >= 2 and near[1][0] <= LINEAR_REACH and near[0][1] != near[1][1]:
        (_, x0, e0), (_, x1, e1) = near[:2]
        return math.exp(math.log(e0) + (math.log(e1) - math.log(e0)) * (x - x0) / (x1 - x0))
    return epsilon(x, method)


def _host_root(g, lo, hi, x0, *, slope, xtol, max_evaluations=HOST_EVALUATIONS):
    """Root of the decreasing ``g`` on ``[lo, hi]``, on the host: secant steps (the first by the guessed
    ``slope``), none longer than 2, each kept strictly inside the bracket of the points evaluated so far (a
    bisection, or a step of 2 away from the one side known, where it is not, or where ``g`` is not finite: NaN
    reads as positive, too little noise).  Stops once a secant step is at most ``xtol`` (the step is taken:
    the secant's error after it is far smaller).

    Returns ``(x, evaluations, below, above)``: ``below`` when ``g(lo) <= 0`` (``x = lo``), ``above`` when
    ``g(hi) > 0`` (``x = hi``).
    """
    a = b = None  # the largest point with g > 0, the smallest with g <= 0
    prev = None  # the last finite evaluation, for the secant
    x = min(max(x0, lo), hi)
    for i in range(1, max_evaluations + 1):
        gx = g(x)
        positive = not gx <= 0.0  # (NaN included)
        if positive:
            a = x
            if x >= hi:
                return hi, i, False, True
        else:
            b = x
            if x <= lo:
                return lo, i, True, False
            if gx == 0.0:
                return x, i, False, False
        step = None
        if math.isfinite(gx):
            s = slope if prev is None or prev[0] == x else (gx - prev[1]) / (x - prev[0])
            step = -gx / s if s < 0 else None
            prev = (x, gx)
        new = None if step is None else min(max(x + min(max(step, -2.0), 2.0), lo), hi)
        if new is not None and (a is None or new > a) and (b is None or new < b):
            if abs(new - x) <= xtol:
                return new, i, False, False
        elif a is not None and b is not None:
            new = 0.5 * (a + b)
        else:
            new = min(a + 2.0, hi) if a is not None else max(b - 2.0, lo)
        if a is not None and b is not None and b - a <= xtol:
            return new, i, False, False
        x = new
    return x, max_evaluations, False, False


def _log_ndtr_host(x):
    """``log Phi(x)`` on the host (to ~1e-10 relative below -30: only a start)."""
    if x > -30.0:
        return math.log(0.5 * math.erfc(-x / math.sqrt(2.0)))
    r = 1.0 / (x * x)
    return -0.5 * x * x - math.log(-x) - 0.5 * math.log(2.0 * math.pi) + math.log1p(-r + 3.0 * r * r - 15.0 * r**3)


def _gaussian_log_delta(eps, mu):
    """``log delta(eps)`` of the Gaussian pair ``N(mu, 1)`` vs ``N(0, 1)``, on the host."""
    la = _log_ndtr_host(-eps / mu + 0.5 * mu)
    z = eps + _log_ndtr_host(-eps / mu - 0.5 * mu) - la
    if z >= 0.0:
        return -math.inf
    return la + (math.log(-math.expm1(z)) if z > -math.log(2.0) else math.log1p(-math.exp(z)))


def _gaussian_mu(eps, delta):
    """The ``mu`` whose Gaussian pair has ``delta(eps) = delta`` (bisection in ``log mu``, on the host)."""
    lo, hi, log_delta = math.log(1e-8), math.log(1e4), math.log(delta)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if _gaussian_log_delta(eps, math.exp(mid)) > log_delta:
            hi = mid
        else:
            lo = mid
    return math.exp(0.5 * (lo + hi))


def _gaussian_epsilon(mu, delta):
    """The ``eps`` with ``delta(eps) = delta`` of the Gaussian pair ``N(mu, 1)`` vs ``N(0, 1)`` (bisection, host)."""
    lo, hi, log_delta = 0.0, 0.5 * mu * mu + 40.0 * mu + 1.0, math.log(delta)
    if _gaussian_log_delta(lo, mu) <= log_delta:
        return 0.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if _gaussian_log_delta(mid, mu) > log_delta:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


_gaussian_mu2_jit = jax.jit(lambda comp: comp.gaussian_mu2())


def _gaussian_mu2_of(mechanism, num_steps):
    """The composition's ``K(1)`` (``mu^2`` of the Gaussian pair with the same): one small program per structure."""
    return float(_gaussian_mu2_jit(to_f64(as_composition(mechanism, num_steps))))


def _host_status(infeasible, ok, at_limit):
    return int(INFEASIBLE if infeasible else NOT_CERTIFIED if not ok else AT_LIMIT if at_limit else OK)


def _host_gap(e, target):
    """``gap`` of :func:`_certify` on the host: the log-gap, 1 for a non-finite epsilon."""
    if not math.isfinite(e):
        return 1.0
    return (math.log(e) if e > 0 else -math.inf) - math.log(target)


def _host_certify(eps_cert, x, target, max_x, nudge):
    """:func:`_certify` on the host (the same steps)."""
    xtol = max(CERTIFY_XTOL, nudge) + 1e-12
    i, a, ga, b, eb, have_b = 0, x, 0.0, max_x, math.inf, False
    while i < CERTIFY_ROUNDS and not (have_b and b - a <= xtol):
        grow = a + max(1.5 * ga, nudge * 2.0**i)
        gb = _host_gap(eb, target)
        w = min(max(ga / (ga - gb if ga - gb > 0 else 1.0), 0.1), 0.9)  # secant, kept inside the bracket
        x_new = a + w * (b - a) if have_b else (a + nudge if i == 0 else grow)
        x_new = min(x_new, max_x)
        e = eps_cert(x_new)
        if e <= target:
            b, eb, have_b = x_new, e, True
        else:
            a, ga = x_new, _host_gap(e, target)
        i += 1
    return b, eb, i, have_b


def _host_largest_count(eps_cert, n, target, max_steps, rounds=CERTIFY_ROUNDS):
    """:func:`_largest_certified_count` on the host (the same steps, numpy's float64 semantics for inf and NaN);
    with more ``rounds``, the estimate's own search for the largest count (from the Gaussian pair's)."""
    i, lo, e_lo, hi, e_hi = 0, 0.0, math.inf, max_steps + 1.0, math.inf
    with np.errstate(all="ignore"):
        while i < rounds and hi - lo > 1:
            g_lo, g_hi = np.float64(_host_gap(e_lo, target)), np.float64(_host_gap(e_hi, target))
            down = hi - np.maximum(1.0, np.ceil(-hi * np.expm1(-3.0 * g_hi)))
            up = lo + np.maximum(1.0, np.ceil(lo * np.expm1(-3.0 * g_lo)))
            w = -g_lo / (g_hi - g_lo)
            w = w if np.isfinite(w) and math.isfinite(e_hi) else 0.5  # bisection where a gap is not measured
            log_lo = np.log(max(lo, 1.0))
            secant = np.floor(np.exp(log_lo + w * (np.log(hi) - log_lo)))
            m = down if lo < 1 else (up if hi > max_steps else secant)
            m = float(np.clip(n if i == 0 else m, lo + 1, hi - 1))
            e = eps_cert(m)
            if e <= target:
                lo, e_lo = m, e
            else:
                hi, e_hi = m, e
            i += 1
    found = lo >= 1
    count = lo if found else (0.0 if hi <= 1 else hi)
    return count, (e_lo if found else e_hi), i, found


# -- noise multiplier -----------------------------------------------------------------------------


def _psg_family(sigma, sampling_prob):
    return PoissonSubsampledGaussian(sigma, sampling_prob)


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


@float64_entry(rounding=_rounding)
def calibrate_noise_multiplier(
    *,
    target_epsilon,
    delta,
    num_steps,
    sampling_prob=None,
    mechanism: Callable | None = None,
    method: str = "characteristic",
    certify: str | None = "certified-fast",
    sigma_max=100.0,
    key=None,
    tau: float = 0.9,
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
      certify: the certified accountant of the final check: ``"certified-fast"``
        (the certified construction on a coarser lattice: a proven bound, ~2e-5
        looser, ~6x faster), ``"certified"`` (the tightest), ``"saddlepoint-certified"``
        or ``"rdp"`` (looser), or None to skip it.
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
    if certify == EVR:
        kwargs = dict(
            target_epsilon=target_epsilon,
            delta=delta,
            num_steps=num_steps,
            sampling_prob=sampling_prob,
            mechanism=mechanism,
            method=method,
            sigma_max=sigma_max,
        )

        def mech_of(r):
            s = float(r.noise_multiplier)
            return (mechanism(s) if mechanism is not None else PoissonSubsampledGaussian(s, sampling_prob)), num_steps

        return _evr_calibration(calibrate_noise_multiplier, kwargs, key, tau, mech_of)
    _no_evr_options(key)
    if sampling_prob is not None:
        _validate.probability("sampling_prob", sampling_prob)
    inputs = {
        "target_epsilon": target_epsilon,
        "delta": delta,
        "sampling_prob": 1.0 if sampling_prob is None else sampling_prob,
        "num_steps": num_steps,
        "sigma_max": sigma_max,
    }
    result = _run("noise_multiplier", _noise_core, inputs, method, certify, mechanism=mechanism)
    if mechanism is not None:  # no sampling rate of its own
        result = dataclasses.replace(result, sampling_prob=jnp.asarray(jnp.nan, jnp.float64))
    return result


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


@float64_entry(rounding=_rounding)
def calibrate_sampling_prob(
    *,
    target_epsilon,
    delta,
    noise_multiplier,
    num_steps,
    method: str = "characteristic",
    certify: str | None = "certified-fast",
    key=None,
    tau: float = 0.9,
) -> CalibrationResult:
    """Largest Poisson sampling rate whose epsilon (at ``delta``) is at most ``target_epsilon``.

    Args:
      target_epsilon: the budget, ``> 0``.
      delta: in ``(0, 1)``.
      noise_multiplier: ``> 0``.
      num_steps: a whole number ``>= 1``.
      method: the estimate that drives the search.
      certify: the certified accountant of the final check, or None
        (see :func:`calibrate_noise_multiplier`).

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
    if certify == EVR:
        kwargs = dict(
            target_epsilon=target_epsilon,
            delta=delta,
            noise_multiplier=noise_multiplier,
            num_steps=num_steps,
            method=method,
        )
        return _evr_calibration(
            calibrate_sampling_prob,
            kwargs,
            key,
            tau,
            lambda r: (PoissonSubsampledGaussian(noise_multiplier, float(r.sampling_prob)), num_steps),
        )
    _no_evr_options(key)
    inputs = {
        "target_epsilon": target_epsilon,
        "delta": delta,
        "noise_multiplier": noise_multiplier,
        "num_steps": num_steps,
    }
    return _run("sampling_prob", _q_core, inputs, method, certify)


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


@float64_entry(rounding=_rounding)
def calibrate_num_steps(
    *,
    target_epsilon,
    delta,
    noise_multiplier,
    sampling_prob,
    max_steps=10**7,
    method: str = "characteristic",
    certify: str | None = "certified-fast",
    key=None,
    tau: float = 0.9,
) -> CalibrationResult:
    """Largest whole number of steps whose epsilon (at ``delta``) is at most ``target_epsilon``.

    Args:
      target_epsilon: the budget, ``> 0``.
      delta: in ``(0, 1)``.
      noise_multiplier: ``> 0``.
      sampling_prob: in ``(0, 1]``.
      max_steps: the largest number of steps searched (status 2 when it fits).
      method: the estimate that drives the search.
      certify: the certified accountant of the final check, or None
        (see :func:`calibrate_noise_multiplier`).

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
    if certify == EVR:
        kwargs = dict(
            target_epsilon=target_epsilon,
            delta=delta,
            noise_multiplier=noise_multiplier,
            sampling_prob=sampling_prob,
            max_steps=max_steps,
            method=method,
        )
        return _evr_calibration(
            calibrate_num_steps,
            kwargs,
            key,
            tau,
            lambda r: (PoissonSubsampledGaussian(noise_multiplier, sampling_prob), int(r.num_steps)),
        )
    _no_evr_options(key)
    inputs = {
        "target_epsilon": target_epsilon,
        "delta": delta,
        "noise_multiplier": noise_multiplier,
        "sampling_prob": sampling_prob,
        "max_steps": max_steps,
    }
    return _run("num_steps", _steps_core, inputs, method, certify)


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
    certify: str | None = "certified-fast",
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

    for name, value in [
        ("target_epsilon", target_epsilon),
        ("delta", delta),
        ("sampling_prob", sampling_prob),
        ("num_steps", num_steps),
    ]:
        if isinstance(value, jax.core.Tracer):
            raise ValueError(
                f"calibrate() runs an optimisation loop on the host and cannot be traced ({name} is a tracer): "
                "call it outside jax.jit/vmap/grad, or use calibrate_noise_multiplier, which is traceable."
            )
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


_CORES = {f.__name__: f for f in (_noise_core, _q_core, _steps_core)}
