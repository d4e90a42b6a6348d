"""The host search (concrete inputs): a secant search started from the Gaussian pair over the accountants'
per-query programs, then the certified check, so a first calibration compiles only what a first query of each
method compiles."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.accountants import internal as _internal
from jaxdp.calibration._certify import certify_shift, largest_certified_count
from jaxdp.calibration._params import param_of
from jaxdp.calibration._result import (
    AT_LIMIT,
    HOST_EVALUATIONS,
    HOST_XTOL,
    INFEASIBLE,
    LINEAR_REACH,
    NOT_CERTIFIED,
    OK,
    _nudge,
)
from jaxdp.mechanisms import as_composition
from jaxdp.numerics import host_bisect, host_secant_root, to_f64

# -- host-staged calibration (concrete inputs) -----------------------------------------------------


def _host_calibration(solved_for, flat, method, certify, mechanism=None):
    """A calibration of concrete inputs on the host, one configuration at a time: the estimate's search and the
    certification are host-side iterations over the accountants' own per-query programs (``epsilon_for_delta``'s,
    compiled once per process and kept on disk by ``program_cache``), so a first calibration compiles what a
    first query of each method compiles, and nothing else (the compiled search, :func:`_batch`, is a program of
    its own: worth its compile for many configurations only)."""
    inputs = [np.asarray(a, np.float64) for a in flat]
    rows = [
        _host_one(solved_for, [float(a[i]) for a in inputs], method, certify, mechanism) for i in range(len(inputs[0]))
    ]
    return tuple(jnp.asarray(np.array(col), dt) for col, dt in zip(zip(*rows), (jnp.float64,) * 3 + (jnp.int64,) * 2))


def _host_one(solved_for, args, method, certify, mechanism):
    """One configuration: ``(value, estimate's epsilon, certified epsilon, evaluations, status)``."""
    target, delta = args[0], args[1]
    mu2 = _gaussian_mu(target, delta) ** 2  # the Gaussian pair's: the searches start from it
    known = {}

    def epsilon(x, name):  # (x: the log parameter, or the count; each evaluation once)
        if (x, name) not in known:
            mech, num_steps = mechanism_at(x)
            eps = _internal.epsilon_of_concrete(mech, num_steps=num_steps, delta=delta, method=name)
            known[x, name] = math.inf if math.isnan(eps) else eps
        return known[x, name]

    spec, fixed = param_of(solved_for, args, math, mechanism)

    def mechanism_at(x):  # (x: the log parameter, or the count)
        return spec.query(x if spec.count else spec.value(x), fixed)

    if spec.count:
        max_steps = spec.limit
        k1 = _gaussian_mu2_of(spec.query(1.0, fixed)[0], 1.0)
        ratio = mu2 / k1 if k1 > 0 else math.inf  # (K(1) rounds to 0 or below for tiny q / sigma: start at the top)
        n0 = min(max(math.floor(ratio), 1.0), max_steps) if math.isfinite(ratio) else max_steps
        n, _, evals, found = largest_certified_count(
            lambda m: epsilon(m, method), n0, target, max_steps, xp=np, rounds=HOST_EVALUATIONS
        )
        if not found:  # even one step exceeds the budget
            return math.nan, epsilon(1.0, method), math.nan, evals, int(INFEASIBLE)
        if certify is None:
            return n, epsilon(n, method), math.nan, evals, _host_status(False, True, n >= max_steps)
        count, eps_c, rounds, ok = largest_certified_count(lambda m: epsilon(m, certify), n, target, max_steps, xp=np)
        infeasible = count < 1
        value = math.nan if infeasible else count
        eps_e = epsilon(max(count, 1.0), method)
        return value, eps_e, eps_c, evals + rounds, _host_status(infeasible, ok, ok and count >= max_steps)

    lo, hi = spec.lo, spec.hi

    def log_mu2(x):
        mech, num_steps = mechanism_at(x)
        return math.log(max(_gaussian_mu2_of(mech, num_steps), 1e-300))

    # the start: the Gaussian pair with the composition's K(1) (one small program), to 1e-3, and the slope of that
    # model's log epsilon there (the estimate's first step; then secant steps on the estimate itself)
    x0, evals0, _, _ = host_secant_root(
        lambda x: log_mu2(x) - math.log(mu2),
        lo,
        hi,
        0.5 * (lo + hi),
        slope=-2.0,
        xtol=1e-3,
        max_evaluations=HOST_EVALUATIONS,
    )
    ends = (max(x0 - 1e-3, lo), min(x0 + 1e-3, hi))
    model = [math.log(max(_gaussian_epsilon(math.exp(0.5 * log_mu2(x)), delta), 1e-300)) for x in ends]
    slope = (model[1] - model[0]) / (ends[1] - ends[0]) if ends[1] > ends[0] else math.nan
    x, evals, below, above = host_secant_root(
        lambda v: _host_gap(epsilon(v, method), target),
        lo,
        hi,
        x0,
        slope=slope if math.isfinite(slope) and slope < 0 else -1.0,
        xtol=HOST_XTOL,
        max_evaluations=HOST_EVALUATIONS,
    )
    evals += evals0
    if above:  # even the largest noise (the smallest rate) exceeds the budget
        return math.nan, epsilon(hi, method), math.nan, evals, int(INFEASIBLE)
    if certify is None:
        x_c, eps_c, rounds, ok = x, math.nan, 0, True
    else:
        nudge = 0.0 if below else _nudge(certify)  # a value at the edge is checked as it is
        x_c, eps_c, rounds, ok = certify_shift(lambda v: epsilon(v, certify), x, target, hi, nudge, xp=np)
    value = spec.value(x_c)
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
    log_delta = math.log(delta)
    return math.exp(
        host_bisect(lambda x: _gaussian_log_delta(eps, math.exp(x)) > log_delta, math.log(1e-8), math.log(1e4))
    )


def _gaussian_epsilon(mu, delta):
    """The ``eps`` with ``delta(eps) = delta`` of the Gaussian pair ``N(mu, 1)`` vs ``N(0, 1)`` (bisection, host)."""
    log_delta = math.log(delta)
    if _gaussian_log_delta(0.0, mu) <= log_delta:
        return 0.0
    return host_bisect(lambda e: not _gaussian_log_delta(e, mu) > log_delta, 0.0, 0.5 * mu * mu + 40.0 * mu + 1.0)


_gaussian_mu2_jit = jax.jit(lambda comp: comp.gaussian_mu2())


def _gaussian_mu2_of(mechanism, num_steps):
    """The composition's ``K(1)`` (``mu^2`` of the Gaussian pair with the same): one small program per structure."""
    return float(_gaussian_mu2_jit(to_f64(as_composition(mechanism, num_steps))))


def _host_status(infeasible, ok, at_limit):
    return int(INFEASIBLE if infeasible else NOT_CERTIFIED if not ok else AT_LIMIT if at_limit else OK)


def _host_gap(e, target):
    """The log-gap ``log e - log target`` on the host, 1 for a non-finite epsilon."""
    if not math.isfinite(e):
        return 1.0
    return (math.log(e) if e > 0 else -math.inf) - math.log(target)
