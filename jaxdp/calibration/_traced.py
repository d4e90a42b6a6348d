"""The traced search (traced inputs, and arrays over ``HOST_CONFIGURATIONS``): a safeguarded Newton iteration on the
estimate with its own derivative, then the certified check as a ``while_loop``, in one program per query kind
(``_batch_jit``, a ``lax.map`` over the configurations); gradients by the implicit function theorem."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxdp.accountants import internal as _internal
from jaxdp.calibration._certify import certify_shift, largest_certified_count
from jaxdp.calibration._params import Param, param_of
from jaxdp.calibration._result import (
    LINEAR_REACH,
    METHOD_XTOL,
    _epsilon,
    _nudge,
    _status,
)
from jaxdp.mechanisms import as_composition
from jaxdp.numerics import (
    implicit_root,
    nan_to,
    program_cache,
    safeguarded_newton,
    to_f64,
    with_slope,
)

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
        x_c, eps_c, rounds, ok = certify_shift(lambda x: eps(x, certify), u_sg, target, hi, nudge)
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


def _param_core(spec: Param, target, delta, fixed, *, method, certify):
    """The search for the parameter of ``spec`` at the fixed hyperparameters ``fixed`` (a tuple)."""
    log_delta = jnp.log(delta)

    def h(u, name, p):  # decreasing in u
        t, ld, *f = p
        mech, n = spec.query(spec.value(u), tuple(f))
        gap = _log_delta_gap(to_f64(as_composition(mech, n)), t, ld, name)
        return -gap if spec.count else gap

    def eps(x, name):  # (x: the parameter's value)
        return _epsilon(*spec.query(x, fixed), delta, name)

    root = _solve(h, (target, log_delta, *fixed), spec.lo, spec.hi, method)
    if spec.count:
        return _count_answer(spec, root, eps, target, method=method, certify=certify)
    u = jnp.where(root.below, spec.lo, root.u)  # below: the bracket's low end already fits (e.g. q = 1)
    eps_u = lambda x, name: eps(spec.value(x), name)  # noqa: E731
    u_c, eps_e, eps_c, rounds, ok = _certify_log_param(eps_u, u, root, target, spec.hi, root.below, method, certify)
    value = jnp.where(root.above, jnp.nan, spec.value(u_c))
    return value, eps_e, eps_c, root.iterations + rounds, _status(root.above, ok, root.below)


def _count_answer(spec: Param, root: _Root, eps, target, *, method, certify):
    """The whole number of steps from the search's root (the floor of ``exp(u)``), then the largest certified count."""
    max_steps = spec.limit
    infeasible, at_max = root.below, root.above
    u = jax.lax.stop_gradient(root.u)  # an integer answer: no gradient
    n = jnp.where(at_max, max_steps, jnp.maximum(jnp.floor(jnp.exp(u) * (1 + 1e-12)), 1.0))
    if certify is None:
        eps_c, rounds, ok, at_limit = jnp.asarray(jnp.nan, jnp.float64), 0, jnp.asarray(True), at_max
    else:
        n, eps_c, rounds, ok = largest_certified_count(lambda m: eps(m, certify), n, target, max_steps)
        infeasible = infeasible | (n < 1)
        at_limit = ok & (n >= max_steps)
    eps_e = _estimate_at(jnp.log(jnp.maximum(n, 1.0)), root, target, lambda v: eps(spec.value(v), method))
    n = jnp.where(infeasible, jnp.nan, n)
    return n, eps_e, eps_c, root.iterations + rounds, _status(infeasible, ok, at_limit)


def _noise_core(target, delta, sampling_prob, num_steps, sigma_max, *, method, certify, mechanism=None):
    row = (target, delta, sampling_prob, num_steps, sigma_max)
    spec, fixed = param_of("noise_multiplier", row, jnp, mechanism)
    return _param_core(spec, target, delta, fixed, method=method, certify=certify)


def _q_core(target, delta, sigma, num_steps, *, method, certify):
    spec, fixed = param_of("sampling_prob", (target, delta, sigma, num_steps), jnp)
    return _param_core(spec, target, delta, fixed, method=method, certify=certify)


def _steps_core(target, delta, sigma, q, max_steps, *, method, certify):
    spec, fixed = param_of("num_steps", (target, delta, sigma, q, max_steps), jnp)
    return _param_core(spec, target, delta, fixed, method=method, certify=certify)


_CORES = {f.__name__: f for f in (_noise_core, _q_core, _steps_core)}
