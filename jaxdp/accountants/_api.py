"""Public accountant entry points and the method registry.

Each method supplies, per adjacency direction, ``log delta(eps)`` and
``eps(log delta)`` for a :class:`~jaxdp.Composition`.  This module validates the
arguments, normalises ``(mechanism, num_steps)`` to a composition, runs the
method under float64 inside one cached ``jax.jit`` per (method, mechanism
structure), takes the worse of the two directions for ``add_or_remove`` and
turns invalid traced inputs into NaN.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.accountants import _bounds, _characteristic, _exact, _gil_pelaez, _rdp, _saddlepoint, _split_saddle
from jaxdp.accountants import certified as _certified
from jaxdp.accountants import montecarlo as _montecarlo
from jaxdp.accountants._characteristic import CharacteristicResult
from jaxdp.accountants._exact import log_delta_gaussian  # noqa: F401  (for accountants.internal: this table is the one importer of method modules)
from jaxdp.accountants._programs import (
    epsilon_of_composition,
    epsilon_with_fallback,
    log_delta_of_composition,
    log_delta_with_fallback,
)
from jaxdp.accountants._registry import (
    NO_HINTS,
    MethodInfo,
    WithFallback,
    available_methods,
    check_supported,
    compile_hints,
    method_info,
    register_method,
    register_methods,
    screened,
    with_fallback,
)
from jaxdp.accountants._split_saddle import SplitTerms
from jaxdp.accountants._staging import Facts, assume, of_concrete
from jaxdp.mechanisms import Composition, Gaussian, Laplace, PoissonSubsampledGaussian, as_composition
from jaxdp.numerics import NEAREST, float64_entry, float64_scope, program_cache, to_f64
from jaxdp.numerics import validate as _validate

__all__ = [
    "CharacteristicResult",
    "MethodInfo",
    "SplitTerms",
    "available_methods",
    "characteristic_terms",
    "default_method",
    "delta_for_epsilon",
    "epsilon_for_delta",
    "log_delta_for_epsilon",
    "method_info",
    "register_method",
    "renyi_dp",
    "saddlepoint_terms",
    "screened",
    "with_fallback",
]


# the built-ins and how the entry points compile them (each module's HINTS, none where it has none): every one
# takes the direction as data
_MODULES = (_rdp, _exact, _split_saddle, _saddlepoint, _certified, _characteristic, _gil_pelaez)
register_methods(
    tuple(info for module in _MODULES for info in module.METHODS),
    hints={
        info.name: dataclasses.replace(getattr(module, "HINTS", {}).get(info.name, NO_HINTS), direction_as_data=True)
        for module in _MODULES
        for info in module.METHODS
    },
)


_BUILT_IN = {name: method_info(name) for name in available_methods()}

#: what ``method=None`` (the default of the entry points) means: the tight proven bound where it applies,
#: else the certified saddle-point bound (mechanisms other than Gaussians and their mixtures, e.g. Laplace)
DEFAULT_METHOD = "certified"
FALLBACK_METHOD = "delta2-certified"


def default_method(mechanism, num_steps=1) -> str:
    """The accountant used when ``method`` is not given: ``"certified"`` (a proven, tight upper bound)
    where it supports the mechanism, else ``"delta2-certified"``.

    Example:
      >>> import jaxdp
      >>> jaxdp.default_method(jaxdp.PoissonSubsampledGaussian(1.0, 0.01)), jaxdp.default_method(jaxdp.Laplace(1.0))
      ('certified', 'delta2-certified')
    """
    comp = as_composition(mechanism, num_steps)
    return DEFAULT_METHOD if method_info(DEFAULT_METHOD).supports(comp) else FALLBACK_METHOD


def _one_configuration(name, value):
    """A query is one configuration: an array where a scalar belongs is refused with the way to ask for many
    (JAX's own broadcasting error deep inside an accountant says nothing of it)."""
    shape = tuple(value.shape) if hasattr(value, "shape") else np.shape(value)  # (a list too, or a tracer)
    if shape != ():
        raise ValueError(
            f"{name} must be a scalar, got shape {shape}: one call accounts one configuration; for many, map it "
            "with jax.vmap or jaxdp.sweep (the calibrators broadcast their arguments themselves)."
        )


def _prepare(mechanism, num_steps, method):
    _one_configuration("num_steps", num_steps)
    if isinstance(mechanism, (Gaussian, Laplace, PoissonSubsampledGaussian)):  # (scalar parameters by definition)
        for path, value in jax.tree_util.tree_flatten_with_path(mechanism)[0]:
            _one_configuration(f"{type(mechanism).__name__}{jax.tree_util.keystr(path)}", value)
    _validate.num_steps("num_steps", num_steps)
    if method is None:
        method = default_method(mechanism, num_steps)
    info = method_info(method)
    comp = as_composition(mechanism, num_steps)
    check_supported(info, comp)
    return info, to_f64(comp), of_concrete(mechanism, num_steps)


def _run(info, facts, args, plain_jit, plain, with_fallback_jit):
    """Runs an entry point's program.  Traced inputs get one program (with a fallback, the cond).  Concrete
    ones get the method alone first (a staged method's light program, see ``_staging``), and the fallback's
    program or the full one only where needed (compiled only then).  Where the step counts are concrete (also
    inside a user's trace, where they are constants of it), the program leaves out the branches they never
    take."""
    # a user's method is keyed by its MethodInfo, not its name: re-registered under the same name (an edit in a
    # notebook, or a built-in's name), it must not be answered by the program traced from the earlier one
    static = {"method": info.name if _BUILT_IN.get(info.name) is info else info, "facts": facts}
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(args)):
        return (with_fallback_jit if isinstance(info, WithFallback) else plain_jit)(*args, **static)
    keep = _jaxdp_code_only(info, args[0])
    if not isinstance(info, WithFallback):
        return _staged(info, plain_jit, plain, args, static, keep)
    value = program_cache.call(
        plain_jit, plain, args, {**static, "or_nan": True}, keep=keep, quick=compile_hints(info).quick_compile
    )
    if not _any_nan(value):
        return value
    backup = _staged(method_info(info.fallback), plain_jit, plain, args, {**static, "method": info.fallback}, keep)
    return jnp.where(jnp.isnan(value), backup, value)


def _staged(info, jitted, fn, args, static, keep):
    """``jitted`` on concrete ``args``: a staged method's lightest program first, and the full one (compiled only
    then) where the lighter answered NaN.  The lightest: for epsilon, where the method has one, its host-staged
    search (``CompileHints.host_epsilon``: its passes as programs of their own), else the light program."""
    hints = compile_hints(info)
    quick = hints.quick_compile
    if not hints.staged:
        return program_cache.call(jitted, fn, args, static, keep=keep, quick=quick)
    facts = static["facts"]
    if fn is epsilon_of_composition and hints.host_epsilon is not None:
        call = functools.partial(program_cache.call, keep=keep, quick=quick)
        value = hints.host_epsilon(*args, facts=facts, call=call)
    else:
        value = program_cache.call(
            jitted, fn, args, {**static, "facts": dataclasses.replace(facts, light=True)}, keep=keep, quick=quick
        )
    if _any_nan(value):
        value = jnp.where(jnp.isnan(value), program_cache.call(jitted, fn, args, static, keep=keep, quick=quick), value)
    return value


def _jaxdp_code_only(info, comp) -> bool:
    """Whether every line of the program is jaxdp's own: a built-in method on jaxdp's mechanisms.  Only such a
    program may be kept on disk (``program_cache``'s key digests jaxdp's source, not a user's registered method
    or mechanism class, which could change under an unchanged key)."""
    return _BUILT_IN.get(info.name) is info and all(type(m).__module__.startswith("jaxdp.") for m in comp.mechanisms)


def epsilon_of_concrete(mechanism, *, num_steps, delta, method: str) -> float:
    """:func:`epsilon_for_delta` of concrete inputs without its validation (the caller's inputs are valid): the
    same programs (a staged method's light one first, a fallback's only where needed, each kept by
    ``program_cache``), so that the calibrators' host-side searches and checks share a first query's compiles."""
    info = method_info(method)
    comp = to_f64(as_composition(mechanism, num_steps))
    args = (comp, jnp.asarray(delta, jnp.float64))
    facts = of_concrete(mechanism, num_steps)
    if isinstance(info, WithFallback) and not method_info(info.fallback).supports(comp):
        # (the method's fallback cannot take this mechanism: its own answer, NaN where it cannot vouch for one)
        return float(
            program_cache.call(
                _epsilon_jit,
                epsilon_of_composition,
                args,
                {"method": info.name, "facts": facts, "or_nan": True},
                keep=_jaxdp_code_only(info, comp),
                quick=compile_hints(info).quick_compile,
            )
        )
    return float(_run(info, facts, args, _epsilon_jit, epsilon_of_composition, _epsilon_fallback_jit))


def _any_nan(value) -> bool:
    """On the host (numpy): a jnp reduction here would be a program of its own, compiled in every process."""
    return bool(np.isnan(np.asarray(value)).any())


_log_delta_jit = jax.jit(log_delta_of_composition, static_argnames=("method", "or_nan", "facts"))
_epsilon_jit = jax.jit(epsilon_of_composition, static_argnames=("method", "or_nan", "facts"))
_log_delta_fallback_jit = jax.jit(log_delta_with_fallback, static_argnames=("method", "facts"))
_epsilon_fallback_jit = jax.jit(epsilon_with_fallback, static_argnames=("method", "facts"))


MONTECARLO = "montecarlo"
_log64 = float64_scope(jnp.log)


def _montecarlo_options(method, key, num_samples):
    """``{}`` for a deterministic method (which takes no ``key``/``num_samples``), else the Monte Carlo options."""
    if method != MONTECARLO:
        if key is not None or num_samples is not None:
            raise ValueError(f"key and num_samples apply to method='montecarlo' only, not method={method!r}.")
        return None
    # a method is a registered pair of traceable functions (method_info, available_methods); Monte Carlo is not
    # one (it needs a key and gives an interval), so it has entry points of its own
    _validate.warn_at_caller(
        "method='montecarlo' is deprecated and will be removed in the next release: call jaxdp.montecarlo_epsilon "
        "or jaxdp.montecarlo_delta (which also return the standard error and interval).",
        DeprecationWarning,
    )
    opts = {"key": key}
    if num_samples is not None:
        opts["num_samples"] = num_samples
    return opts


def log_delta_for_epsilon(mechanism, *, epsilon, num_steps=1, method: str | None = None, key=None, num_samples=None):
    """Natural log of :func:`delta_for_epsilon` (finite down to delta ~ 1e-300 and below).

    Example:
      >>> import jaxdp
      >>> m = jaxdp.Gaussian(1.0)
      >>> round(float(jaxdp.log_delta_for_epsilon(m, epsilon=40.0, num_steps=1, method="exact")), 4)
      -788.4234
    """
    mc = _montecarlo_options(method, key, num_samples)
    if mc is not None:
        return _log64(_montecarlo.montecarlo_delta(mechanism, epsilon=epsilon, num_steps=num_steps, **mc).value)
    return _log_delta_for_epsilon(mechanism, epsilon=epsilon, num_steps=num_steps, method=method)


@float64_entry
def _log_delta_for_epsilon(mechanism, *, epsilon, num_steps=1, method: str | None = None):
    _one_configuration("epsilon", epsilon)
    _validate.nonnegative("epsilon", epsilon)
    info, comp, facts = _prepare(mechanism, num_steps, method)
    args = (comp, jnp.asarray(epsilon, jnp.float64))
    return _run(
        info,
        facts,
        args,
        _log_delta_jit,
        log_delta_of_composition,
        _log_delta_fallback_jit,
    )


def delta_for_epsilon(mechanism, *, epsilon, num_steps=1, method: str | None = None, key=None, num_samples=None):
    """delta such that ``num_steps`` runs of ``mechanism`` are (epsilon, delta)-DP.

    Args:
      mechanism: a mechanism or :class:`~jaxdp.Composition` (pytree; its float
        fields may be traced).
      epsilon: target epsilon ``>= 0``.
      num_steps: number of repetitions (a whole number ``>= 1``; may be traced).
      method: accountant, one of :func:`available_methods`; by default (None) the tight proven
        upper bound ``"certified"`` (``"delta2-certified"`` for mechanisms it does not support,
        see :func:`default_method`).  Its first call on a machine compiles (the times:
        ``benchmarks/results/startup.md``), and the program is kept on disk for later processes
        (``JAXDP_CACHE_DIR``, see the README).
        ``"montecarlo"`` (deprecated: call :func:`jaxdp.montecarlo_delta`, which also gives its standard error
        and interval): a Monte Carlo estimate; it needs ``key`` and takes ``num_samples``.
      key, num_samples: the PRNG key and sample count of ``method="montecarlo"`` (only).

    Returns:
      A float64 scalar in ``[0, 1]``; NaN when traced inputs are out of range.  Traced
      inside your ``jit``/``vmap``/``grad`` with x64 off: float32, rounded upwards (the
      computation is float64 either way; see "Float64" in the README).

    Raises:
      ValueError: for out-of-range concrete arguments, an unknown method, or an array where a scalar belongs
        (one call is one configuration: ``jax.vmap`` it, or use :func:`jaxdp.sweep`, for many).

    Formal Guarantees:
      With a ``certified`` method (see :func:`method_info`) the value is an
      upper bound on the true delta(epsilon) of the composition under the
      mechanism's adjacency, up to the numerical assumptions documented by the
      method.

    Example:
      >>> import jaxdp
      >>> m = jaxdp.Gaussian(1.0)
      >>> d = jaxdp.delta_for_epsilon(m, epsilon=1.0, num_steps=1, method="exact")
      >>> round(float(d), 6)   # Phi(-1/2) - e Phi(-3/2)
      0.126937
    """
    mc = _montecarlo_options(method, key, num_samples)
    if mc is not None:
        return _montecarlo.montecarlo_delta(mechanism, epsilon=epsilon, num_steps=num_steps, **mc).value
    return _delta_for_epsilon(mechanism, epsilon=epsilon, num_steps=num_steps, method=method)


@float64_entry
def _delta_for_epsilon(mechanism, *, epsilon, num_steps=1, method=None):
    return jnp.exp(_log_delta_for_epsilon(mechanism, epsilon=epsilon, num_steps=num_steps, method=method))


def epsilon_for_delta(mechanism, *, delta, num_steps=1, method: str | None = None, key=None, num_samples=None):
    """Smallest epsilon such that ``num_steps`` runs are (epsilon, delta)-DP.

    Args:
      mechanism: a mechanism or :class:`~jaxdp.Composition`.
      delta: target delta in ``(0, 1)``.
      num_steps: number of repetitions (a whole number ``>= 1``; may be traced).
      method: accountant, one of :func:`available_methods`; by default (None) the tight proven
        upper bound ``"certified"`` (``"delta2-certified"`` for mechanisms it does not support,
        see :func:`default_method`).  Its first call on a machine compiles (the times:
        ``benchmarks/results/startup.md``), and the program is kept on disk for later processes
        (``JAXDP_CACHE_DIR``, see the README).
        ``"montecarlo"`` (deprecated: call :func:`jaxdp.montecarlo_epsilon`, which also gives its standard error
        and interval): a Monte Carlo estimate; it needs ``key`` and takes ``num_samples``.
      key, num_samples: the PRNG key and sample count of ``method="montecarlo"`` (only).

    Returns:
      A float64 scalar ``>= 0``; NaN when traced inputs are out of range.  Traced
      inside your ``jit``/``vmap``/``grad`` with x64 off: float32, rounded upwards.

    Raises:
      ValueError: for out-of-range concrete arguments, an unknown method, or an array where a scalar belongs
        (one call is one configuration: ``jax.vmap`` it, or use :func:`jaxdp.sweep`, for many).

    Formal Guarantees:
      With a ``certified`` method the value is an upper bound on the optimal
      epsilon (up to the method's documented numerical assumptions).

    Example:
      >>> import jax, jaxdp
      >>> m = jaxdp.PoissonSubsampledGaussian(noise_multiplier=1.0, sampling_prob=0.01)
      >>> eps = jaxdp.epsilon_for_delta(m, num_steps=2000, delta=1e-5, method="rdp")
      >>> eps.dtype, round(float(eps), 2)
      (dtype('float64'), 2.87)
      >>> grad = jax.grad(lambda s: jaxdp.epsilon_for_delta(
      ...     jaxdp.PoissonSubsampledGaussian(s, 0.01), num_steps=2000, delta=1e-5, method="rdp"))(1.0)
      >>> bool(grad < 0)
      True
    """
    mc = _montecarlo_options(method, key, num_samples)
    if mc is not None:
        return _montecarlo.montecarlo_epsilon(mechanism, delta=delta, num_steps=num_steps, **mc).value
    return _epsilon_for_delta(mechanism, delta=delta, num_steps=num_steps, method=method)


@float64_entry
def _epsilon_for_delta(mechanism, *, delta, num_steps=1, method=None):
    _one_configuration("delta", delta)
    _validate.open_unit("delta", delta)
    info, comp, facts = _prepare(mechanism, num_steps, method)
    args = (comp, jnp.asarray(delta, jnp.float64))
    return _run(info, facts, args, _epsilon_jit, epsilon_of_composition, _epsilon_fallback_jit)


def _per_direction(comp: Composition, fn):
    """``[fn(d) for d in comp.directions]``, through one traced copy of ``fn`` (a ``lax.map`` over the direction as
    data, remove then add: ``comp.directions``' order) where every mechanism takes the direction as data."""
    if comp.both_directions_as_data:
        both = jax.lax.map(fn, jnp.array([False, True]))
        return [jax.tree.map(lambda x, i=i: x[i], both) for i in range(2)]
    return [fn(d) for d in comp.directions]


def _renyi_impl(comp: Composition, orders):
    curves = _per_direction(comp, lambda d: jax.vmap(lambda a: _bounds.rdp_curve(comp, d, a))(orders))
    r = jnp.max(jnp.stack(curves), axis=0)
    return jnp.where(comp.valid() & (orders > 1), r, jnp.nan)


_renyi_jit = jax.jit(_renyi_impl)


@float64_entry
def renyi_dp(mechanism, *, orders, num_steps=1):
    """Rényi-DP curve ``r(alpha)`` of the composition at real orders ``alpha > 1``.

    For ``add_or_remove`` the larger of the two directions is returned.

    Example:
      >>> import jaxdp
      >>> r = jaxdp.renyi_dp(jaxdp.Gaussian(2.0), orders=[2.0, 8.0], num_steps=10)
      >>> [round(float(x), 6) for x in r]   # 10 * alpha / (2 * 4)
      [2.5, 10.0]
    """
    orders_arr = jnp.atleast_1d(jnp.asarray(orders, jnp.float64))
    if _validate.is_concrete(orders):
        _validate.finite("orders", orders)
        if not np.all(np.asarray(orders, np.float64) > 1):  # (numpy: this may run inside a trace)
            raise ValueError(f"orders must all be > 1, got {orders!r}.")
    _validate.num_steps("num_steps", num_steps)
    comp = to_f64(as_composition(mechanism, num_steps))
    out = _renyi_jit(comp, orders_arr)
    return out if np.ndim(orders) else out[0]


def _terms_impl(comp: Composition, epsilon, facts: Facts | None = None):
    with assume(facts):
        return _worse_direction(
            comp, epsilon, lambda d: _split_saddle.split_terms(comp, d, epsilon, _bounds.log_delta_saddlepoint)
        )


def _worse_direction(comp, epsilon, terms_of):
    """``terms_of(direction)`` of the direction with the larger ``log_delta`` (add_or_remove), NaN (False for a
    flag) where the composition or ``epsilon`` is out of range."""
    best, *rest = _per_direction(comp, terms_of)
    for r in rest:
        best = jax.tree.map(lambda a, b, r=r, best=best: jnp.where(r.log_delta > best.log_delta, b, a), best, r)
    ok = comp.valid() & (epsilon >= 0)
    return jax.tree.map(lambda x: jnp.where(ok, x, jnp.nan) if jnp.issubdtype(x.dtype, jnp.floating) else x & ok, best)


_terms_jit = jax.jit(_terms_impl, static_argnames=("facts",))


def _characteristic_terms_impl(comp: Composition, epsilon):
    return _worse_direction(comp, epsilon, lambda d: _characteristic.characteristic_terms(comp, d, epsilon))


_characteristic_terms_jit = jax.jit(_characteristic_terms_impl)


@float64_entry(rounding=NEAREST)
def characteristic_terms(mechanism, *, epsilon, num_steps=1) -> CharacteristicResult:
    """The characteristic-function accountant's contour quadrature at ``epsilon``, with its error terms.

    This is ``method="characteristic"`` before its fallback: where ``reliable`` is false (few steps at a tiny
    sampling rate, whose privacy-loss law has a spike too narrow for the contour) the method answers with the
    certified bound instead.  For ``add_or_remove`` the direction with the larger delta is reported.

    Returns:
      :class:`CharacteristicResult`: ``t`` (the contour's abscissa), ``ds`` and ``s_max`` (node spacing and
      truncation point), ``log_delta`` (the estimate), ``log_alias_bound`` (a proven bound on the aliasing
      error), ``log_truncation_estimate`` and ``log_rounding_estimate`` (estimated errors), ``reliable``.

    Example:
      >>> import math, jaxdp
      >>> r = jaxdp.characteristic_terms(jaxdp.PoissonSubsampledGaussian(1.0, 0.01), epsilon=2.0, num_steps=1000)
      >>> bool(r.reliable), float(r.log_alias_bound) < float(r.log_delta) + math.log(1e-6)
      (True, True)
    """
    _validate.nonnegative("epsilon", epsilon)
    _validate.num_steps("num_steps", num_steps)
    comp = to_f64(as_composition(mechanism, num_steps))
    return _characteristic_terms_jit(comp, jnp.asarray(epsilon, jnp.float64))


@float64_entry(rounding=NEAREST)
def saddlepoint_terms(mechanism, *, epsilon, num_steps=1) -> SplitTerms:
    """The bulk/jump-split saddle-point estimate at ``epsilon``, with how much to trust it.

    This is ``method="saddlepoint"``.  ``method="delta2"`` returns the one-Gaussian ``delta_2``
    (``log_delta_plain`` here), which is far off in epsilon at sampling rates of 1e-4 to 1e-3; the split
    estimate is within 1 % of the characteristic accountant there (the figures:
    ``benchmarks/results/saddlepoint_accuracy.md``).  It splits the tilted law of each step into a bulk and the
    rare large losses
    ("jumps") that dominate it at small sampling rates, and sums over the number of jumps
    (``jaxdp/accountants/_split_saddle/``).  For ``add_or_remove`` the direction with the larger estimated
    delta is reported.  An estimate, not a bound.

    Returns:
      :class:`SplitTerms`: ``saddle_point`` (``t*``), ``log_delta`` (the estimate), ``log_delta_plain``
      (the one-Gaussian ``delta_2``), ``expected_jumps`` (the tilted mean number of steps in the jump
      regime; 0 where there is none) and ``error_indicator`` (the next-order Edgeworth terms' effect on
      epsilon, relative; above 1 % the estimate is not to be trusted).

    Example:
      >>> import math, jaxdp
      >>> m = jaxdp.PoissonSubsampledGaussian(1.0, 1e-3)
      >>> r = jaxdp.saddlepoint_terms(m, epsilon=0.55514, num_steps=10_000)
      >>> delta, delta_2 = math.exp(float(r.log_delta)), math.exp(float(r.log_delta_plain))
      >>> abs(delta / 1e-6 - 1) < 0.02, round(delta_2 / 1e-6)  # the true delta is 1.0e-06
      (True, 8)
      >>> float(r.error_indicator) < 0.01
      True
    """
    _validate.nonnegative("epsilon", epsilon)
    _validate.num_steps("num_steps", num_steps)
    comp = to_f64(as_composition(mechanism, num_steps))
    args = (comp, jnp.asarray(epsilon, jnp.float64))
    static = {"facts": of_concrete(mechanism, num_steps)}
    info = _BUILT_IN["saddlepoint"]  # (this is its estimate, with the terms; kept and compiled as its programs)
    keep = _jaxdp_code_only(info, comp)
    return program_cache.call(_terms_jit, _terms_impl, args, static, keep=keep, quick=compile_hints(info).quick_compile)
