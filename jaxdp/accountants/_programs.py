"""The composition-level programs behind the entry points: the worse of the adjacency directions, float64 and
invalid traced inputs as NaN, and an estimate answered by its fallback where it cannot vouch for its value (with a
screen the two share computed once).  ``_api`` validates, stages and jits them."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdp.accountants._registry import MethodInfo, Screened, WithFallback, compile_hints, method_info
from jaxdp.accountants._staging import Facts, assume, assumed
from jaxdp.accountants._staging import valid_query as _valid_query
from jaxdp.mechanisms import Composition
from jaxdp.numerics import nan_to

__all__ = [
    "epsilon_of_composition",
    "epsilon_with_fallback",
    "log_delta_of_composition",
    "log_delta_with_fallback",
]


def _worst_direction(comp: Composition, arg, info: MethodInfo, get, given_screen=False, stages=None):
    """``max`` over the adjacency directions of ``get(info)(comp, direction, arg)``.

    A :class:`Screened` method computes a later direction only where its screen's cheap certified bound exceeds
    the worse value so far (with ``given_screen``, by ``epsilon_given_screen`` given the screen's stage, or its
    epsilon where it has none).  ``stages``: the screen's stages, computed by the caller (:func:`_screen_and_worst`,
    in the same layout), instead of here.  Where the method and every mechanism take the direction as data, the two
    directions are the two steps of one ``lax.scan`` (one traced copy of the method).
    """
    screen = method_info(info.screen) if isinstance(info, Screened) else None
    reuse = info.epsilon_given_screen if (given_screen and screen is not None) else None

    def one(worst, c, d, a, given):
        if screen is None:
            return _larger(worst, get(info)(c, d, a))
        if given is not None:  # (a stage of _screen_and_worst: the screen has a screen_stage, see _shared_screen)
            stage, cheap = given, given.epsilon
        elif reuse is not None and info.screen_stage is not None:
            stage = info.screen_stage(c, d, a)
            cheap = stage.epsilon
        else:
            stage = cheap = get(screen)(c, d, a)
        full = jax.lax.cond(
            ~(cheap <= worst),  # NaN computes it too
            lambda c, a, s: get(info)(c, d, a) if reuse is None else reuse(c, d, a, s),
            lambda c, a, s: jnp.asarray(-jnp.inf, jnp.float64),
            c,
            a,
            stage,
        )
        return _larger(worst, full)

    if _directions_scanned(comp, info):
        # remove, then add (the screen of the first compares with -inf: it is always computed)
        flags = jnp.array([False, True])
        worst, _ = jax.lax.scan(
            lambda w, x: (one(w, comp, x[0], arg, x[1]), None),
            jnp.asarray(-jnp.inf, jnp.float64),
            (flags, stages),
        )
        return worst
    if stages is not None:
        worst = reuse(comp, comp.directions[0], arg, stages[0])
    else:
        worst = get(info)(comp, comp.directions[0], arg)
    for i, d in enumerate(comp.directions[1:], start=1):
        worst = one(worst, comp, d, arg, None if stages is None else stages[i])
    return worst


def _directions_scanned(comp, info) -> bool:
    """Whether the directions of ``comp`` are the two steps of one ``lax.scan`` (see :func:`_worst_direction`)."""
    return comp.both_directions_as_data and compile_hints(info).direction_as_data


def _screen_and_worst(comp, arg, screen_stage, fn, scanned: bool):
    """``(max over directions of fn(comp, d, arg, stage_d), stages)`` with ``stage_d = screen_stage(comp, d, arg)``,
    each direction's stage computed once: ``stages`` in :func:`_worst_direction`'s layout (stacked along the scan
    where ``scanned``, else one per direction)."""

    def one(worst, d):
        stage = screen_stage(comp, d, arg)
        return _larger(worst, fn(comp, d, arg, stage)), stage

    worst = jnp.asarray(-jnp.inf, jnp.float64)
    if scanned:
        return jax.lax.scan(one, worst, jnp.array([False, True]))
    stages = []
    for d in comp.directions:
        worst, stage = one(worst, d)
        stages.append(stage)
    return worst, stages


def _larger(a, b):
    """``max(a, b)`` whose derivative is the larger one's alone (``jnp.maximum`` mixes in the
    other's with weight 0, and 0 x NaN is NaN: a direction whose delta is exactly 0, such as
    add adjacency past its largest loss, has a non-finite derivative).  NaN in either is NaN:
    a direction that could not be evaluated is never dropped in favour of the other."""
    return jnp.where(jnp.isnan(a) | jnp.isnan(b), jnp.nan, jnp.where(b > a, b, a))


def log_delta_of_composition(comp: Composition, epsilon, method: str, or_nan: bool = False, facts: Facts | None = None):
    """``log delta(eps)`` of the worse direction (NaN for invalid traced inputs).  ``or_nan``: with
    the method's ``log_delta_or_nan`` (NaN where it cannot vouch for its value).  ``facts``: what holds for
    every ``comp`` it is called with (see ``_staging``; static)."""
    with assume(facts):
        return _log_delta_of_composition(comp, epsilon, method, or_nan)


def _log_delta_of_composition(comp, epsilon, method, or_nan):
    info = method_info(method)
    get = (lambda i: i.log_delta_or_nan) if or_nan else (lambda i: i.log_delta)
    log_delta = jnp.minimum(_worst_direction(comp, epsilon, info, get), 0.0)
    # a bound that could not be evaluated is the vacuous delta = 1, never NaN
    if info.certified and not assumed().light:
        log_delta = nan_to(log_delta, 0.0)
    return jnp.where(_valid_query(comp, epsilon, "epsilon"), log_delta, jnp.nan)


def epsilon_of_composition(comp: Composition, delta, method: str, or_nan: bool = False, facts: Facts | None = None):
    """epsilon of the worse direction (NaN for invalid traced inputs).  ``or_nan``: with the method's
    ``epsilon_or_nan``.  ``facts``: as for :func:`log_delta_of_composition`."""
    with assume(facts):
        return _epsilon_of_composition(comp, delta, method, or_nan)


def _epsilon_of_composition(comp, delta, method, or_nan, stages=None):
    info = method_info(method)
    ok = _valid_query(comp, delta, "delta")
    log_delta = jnp.log(jnp.where(ok, delta, 0.5))
    get = (lambda i: i.epsilon_or_nan) if or_nan else (lambda i: i.epsilon)
    eps = _worst_direction(comp, log_delta, info, get, given_screen=True, stages=stages)
    if info.certified and not assumed().light:  # likewise the vacuous epsilon = inf
        eps = nan_to(eps, jnp.inf)
    return jnp.where(ok, eps, jnp.nan)


def _shared_screen(info):
    """The screen stage that ``info`` (a :class:`WithFallback`) and its fallback can share under a user's trace (see
    :func:`epsilon_with_fallback`), else None."""
    if not isinstance(info, WithFallback) or info.epsilon_or_nan_given_screen is None:
        return None
    backup = method_info(info.fallback)
    if not isinstance(backup, Screened) or backup.epsilon_given_screen is None or backup.screen_stage is None:
        return None
    if compile_hints(info).direction_as_data != compile_hints(backup).direction_as_data:
        return None
    return backup.screen_stage


def _with_fallback(of_composition, name):
    """The public entry points' program: a :class:`WithFallback` method where it vouches for its value, its
    ``fallback`` elsewhere (one ``lax.cond``; under ``vmap`` both run)."""

    def program(comp, arg, method, facts: Facts | None = None):
        info = method_info(method)
        value = of_composition(comp, arg, method, or_nan=True, facts=facts)
        reliable = ~jnp.isnan(value) | ~_valid_query(comp, arg, name)
        return jax.lax.cond(
            jnp.all(reliable),
            lambda c, a: value,
            lambda c, a: jnp.where(reliable, value, of_composition(c, a, info.fallback, facts=facts)),
            comp,
            arg,
        )

    return program


log_delta_with_fallback = _with_fallback(log_delta_of_composition, "epsilon")
_epsilon_with_fallback_apart = _with_fallback(epsilon_of_composition, "delta")


def epsilon_with_fallback(comp, delta, method, facts: Facts | None = None):
    """The epsilon program of :func:`_with_fallback`; where the estimate and its screened fallback share the screen
    (:func:`_shared_screen`), each direction's screen stage is computed once, before the ``lax.cond``, and given to
    both: the fallback's values are those it computes alone, the estimate's its ``epsilon_or_nan``'s to the solvers'
    tolerance (``epsilon_or_nan_given_screen``).  Why: under a user's trace both are one program, which otherwise
    holds two copies of the screen's solve."""
    info = method_info(method)
    screen = _shared_screen(info)
    if screen is None:
        return _epsilon_with_fallback_apart(comp, delta, method, facts=facts)
    with assume(facts):
        ok = _valid_query(comp, delta, "delta")
        log_delta = jnp.log(jnp.where(ok, delta, 0.5))
        scanned = _directions_scanned(comp, info)
        value, stages = _screen_and_worst(comp, log_delta, screen, info.epsilon_or_nan_given_screen, scanned)
        value = jnp.where(ok, value, jnp.nan)
        reliable = ~jnp.isnan(value) | ~ok
        return jax.lax.cond(
            jnp.all(reliable),
            lambda c, d, st: value,
            lambda c, d, st: jnp.where(reliable, value, _epsilon_of_composition(c, d, info.fallback, False, st)),
            comp,
            delta,
            stages,
        )
