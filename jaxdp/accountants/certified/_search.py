"""The certified accountant's entry points: the certified delta at epsilon and the certified epsilon.

Each direction's bound is the smallest of verified ones: the FFT window's (every candidate checked by the direct
formula), the saddle-point bound re-checked, the pure-DP bound of a loss bounded above, and, only where all fail,
Rényi DP with checked orders.  The window is tilted at the estimate's saddle point, and retried at other tilts.

Construction, proof of domination, floating-point model and references:
``docs/accountants/certified.md``; the soundness review: ``docs/soundness.md``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.accountants import _bounds, _cgf
from jaxdp.accountants._registry import CompileHints, MethodInfo, screened
from jaxdp.accountants._staging import assume, assumed, valid_query
from jaxdp.accountants.certified._constants import (
    _EPS_NUDGES,
    _U,
    FALLBACK_TILT,
    FAST_GRID,
    REFINE_TOL,
    TILT_FACTORS,
)
from jaxdp.accountants.certified._window import (
    _build_window,
    _log_fft_term,
    _log_weights,
    _Window,
    _window_log_delta,
)
from jaxdp.mechanisms import Composition, Gaussian, MixtureMechanism, is_add
from jaxdp.numerics import argmax, argmin, log_sub_exp, nan_to

__all__ = ["HINTS", "METHODS", "CertifiedResult", "certified_terms", "epsilon_certified", "log_delta_certified"]


class CertifiedResult(NamedTuple):
    """Certified quantities for one epsilon and direction (logs of deltas).

    Attributes:
      tilt: the tilt ``t`` (saddle point of ``eps``).
      spacing: lattice spacing ``D``.
      log_delta: log of the certified delta from the tilted-FFT bound alone
        (0 when the window cannot certify ``eps``).
      log_delta_lattice: log of the lattice part (without the terms below).
      log_dropped: log of the dropped-mass terms (``+inf`` atom and the
        Chernoff bound above the window).
      log_fft_error: log of the 2-norm bound on the floating-point FFT error over the window.
      log_delta_upper: the smallest verified bound (what ``method="certified"`` returns; see
        :func:`log_delta_certified`).
    """

    tilt: jax.Array
    spacing: jax.Array
    log_delta: jax.Array
    log_delta_lattice: jax.Array
    log_dropped: jax.Array
    log_fft_error: jax.Array
    log_delta_upper: jax.Array


def certified_terms(comp: Composition, direction: str, epsilon, grid=None) -> CertifiedResult:
    """Certified delta at ``epsilon`` with its pieces (one direction; ``grid``: ``(NUM_BINS, LATTICE_SIZE)``)."""
    epsilon = jnp.asarray(epsilon, jnp.float64)
    sp = _bounds.saddlepoint_terms(comp, direction, epsilon)
    win = _build_window(comp, direction, sp.saddle_point, sp.log_delta, grid)
    log_delta, log_fin = _window_log_delta(win, epsilon)
    log_delta = nan_to(log_delta, 0.0)
    best = jnp.minimum(log_delta, sp.log_delta_upper)  # (the latter includes the pure-DP bound)
    best = nan_to(best, 0.0)
    if assumed().light:  # the Rényi-DP bound is the full program's (see _staging)
        upper = jnp.where(best < 0.0, best, jnp.nan)
    else:
        upper = jax.lax.cond(
            best < 0.0,
            lambda b: b,
            lambda b: jnp.minimum(b, nan_to(_bounds.log_delta_rdp(comp, direction, epsilon), 0.0)),
            best,
        )
    return CertifiedResult(sp.saddle_point, win.spacing, log_delta, log_fin, win.log_rest, win.log_fft_error, upper)


def _pure_dp_epsilon(comp, direction):
    """``L_max`` of the composition (``+inf`` if unbounded): delta is 0 there."""
    return jax.lax.stop_gradient(comp.max_privacy_loss(direction))


def log_delta_certified(comp, direction, epsilon, grid=None):
    """Certified upper bound on ``log delta(eps)``."""
    return certified_terms(comp, direction, epsilon, grid).log_delta_upper


def _window_epsilon(win: _Window, log_delta, eps_guess):
    """Smallest verified eps on the window with certified delta <= target (``inf`` if none).

    Between lattice points ``delta_fin(eps) = e^G (A_r - e^eps B_r)`` (before the
    FFT term) with ``A_r = sum_{l > l_r} y e^{-t l}`` and
    ``B_r = sum_{l > l_r} y e^{-(t+1) l}`` (reverse cumulative sums, scaled at the
    guess to stay in range), which gives the root in closed form.  The FFT term
    ``e^{G - t eps} ||w(eps)||_2 ||e||_2`` decreases with ``eps``, so solving
    again with the target lowered by its value at the first root gives a root
    where the sum of both is below the target.  The candidate is then checked
    with the direct formula of :func:`_window_log_delta`.
    """
    num_bins = win.log_y.shape[-1]
    r = jnp.arange(num_bins, dtype=jnp.float64)
    ell = win.ell_start + r * win.spacing
    ok_rest = win.log_rest < log_delta
    log_target = log_sub_exp(log_delta, jnp.minimum(win.log_rest, log_delta))
    log_target = log_target - win.log_rel - jnp.log1p(4 * _U * num_bins) - win.log_scale
    ref = jnp.clip(eps_guess, ell[0], ell[-1])
    # scaled so the terms at the guess are ~y: A e^{t ref}, B e^{(t + 1) ref}
    ua = jnp.exp(jnp.minimum(win.log_y - win.tilt * (ell - ref), 700.0))
    ub = jnp.exp(jnp.minimum(win.log_y - (win.tilt + 1.0) * (ell - ref), 700.0))
    ca = jnp.cumsum(ua[::-1])[::-1]
    cb = jnp.cumsum(ub[::-1])[::-1]
    zero = jnp.zeros(1)
    a1 = jnp.concatenate([ca[1:], zero])  # sums over r' > r
    b1 = jnp.concatenate([cb[1:], zero])
    # delta_fin / e^G at eps = l_r, scaled by e^{t ref}: a1 - e^{l_r - ref} b1
    log_d = jnp.log(jnp.maximum(a1 - jnp.exp(ell - ref) * b1, 1e-300))

    def root(log_target):
        log_t_scaled = log_target + win.tilt * ref
        count = jnp.sum(log_d >= log_t_scaled)
        found = ok_rest & (count >= 1) & (count <= num_bins - 2)
        r_star = jnp.clip(count - 1, 0, num_bins - 2)
        la = jnp.log(jnp.maximum(a1[r_star], 1e-300))
        lb = jnp.log(jnp.maximum(b1[r_star], 1e-300))
        gap_ok = found & (log_t_scaled < la - 1e-12)
        lt = jnp.where(gap_ok, log_t_scaled, la - 1.0)
        eps = ref + log_sub_exp(la, lt) - lb
        return jnp.clip(eps, ell[r_star], ell[r_star + 1]), found

    eps0, found0 = root(log_target)
    log_fft0 = -win.tilt * eps0 + _log_fft_term(win, _log_weights(win, eps0))
    lowered = found0 & (log_fft0 < log_target)
    eps, found = root(jnp.where(lowered, log_sub_exp(log_target, jnp.minimum(log_fft0, log_target)), log_target))
    found = found & lowered
    cands = eps + _EPS_NUDGES * (1.0 + jnp.abs(eps))
    # eps = 0 first: the bound may already hold there (then the solve has no root)
    cands = jnp.concatenate([jnp.zeros(1), cands])
    log_ds, _ = _window_log_delta(win, cands)
    passed = log_ds <= log_delta
    first = argmax(passed)
    ok = passed[0] | (jnp.any(passed) & found)
    return jnp.where(ok, cands[first], jnp.inf)


class _Start(NamedTuple):
    """Where :func:`epsilon_certified`'s search starts (one direction): the screen's stage, its certified epsilon
    (``inf`` where it failed), the first pass's reference epsilon and tilt."""

    stage: _bounds.ScreenStage
    eps_sp: jax.Array
    eps0: jax.Array
    t0: jax.Array


def _start(comp, direction, log_delta, screened=None) -> _Start:
    # the certified saddle-point epsilon and the delta_2 estimate with its saddle point: one solve (the screen's)
    stage = _bounds.screen_stage(comp, direction, log_delta) if screened is None else screened
    eps_sp = nan_to(stage.epsilon, jnp.inf)
    has_estimate = jnp.isfinite(stage.estimate)
    eps0 = jnp.where(has_estimate, stage.estimate, jnp.where(jnp.isfinite(eps_sp), eps_sp, 1.0))
    eps0 = jax.lax.stop_gradient(eps0)
    # (where the estimate failed: the screen's tilt, else the Gaussian pair's; the window's bound holds at any tilt)
    fallback = jnp.where(jnp.isfinite(stage.log_t_screen), stage.log_t_screen, _cgf.guess_log_t_for_epsilon(comp, eps0))
    t0 = jnp.exp(jnp.where(has_estimate, stage.log_t, jax.lax.stop_gradient(fallback)))
    return _Start(stage, eps_sp, eps0, t0)


def _solve_or_inf(comp, direction, log_delta, grid, t, eps_ref):
    """The window's verified epsilon at tilt ``t`` (``inf`` where it fails or ``t`` is not finite)."""
    run = jnp.isfinite(t)
    return jax.lax.cond(
        run,
        lambda tt, e: nan_to(
            _window_epsilon(_build_window(comp, direction, tt, log_delta, grid), log_delta, e), jnp.inf
        ),
        lambda tt, e: jnp.asarray(jnp.inf, jnp.float64),
        jnp.where(run, t, 1.0),
        eps_ref,
    )


def _second_pass_needed(eps1, st: _Start):
    """``(need, ref)``: whether the second pass runs after a first whose window gave ``eps1`` (it failed, or its root
    landed more than ``REFINE_TOL`` from the estimate), and its reference epsilon."""
    best = jnp.minimum(eps1, st.eps_sp)
    ref = jax.lax.stop_gradient(jnp.where(jnp.isfinite(best), best, st.eps0))
    far = jnp.abs(ref - st.eps0) > REFINE_TOL * (jnp.abs(st.eps0) + 1e-3)
    return far | ~jnp.isfinite(eps1), ref


def _retry_tilts(comp, direction, eps_ref):
    """The second pass's candidate tilts: ``TILT_FACTORS`` times the saddle point of ``eps_ref``, and
    ``FALLBACK_TILT``."""
    t_ref = jax.lax.stop_gradient(_cgf.saddle_point(comp, direction, eps_ref))
    return jnp.concatenate([t_ref * TILT_FACTORS, jnp.array([FALLBACK_TILT])])


def _ranked_tilt(comp, direction, log_delta, eps_ref, grid):
    """The retried tilt whose window on ``grid`` gives the smallest epsilon (NaN where none succeeds), ranked without
    gradients (a failed tilt may have non-finite partials)."""
    tilts = _retry_tilts(comp, direction, eps_ref)
    frozen = jax.lax.stop_gradient(comp)
    eps = jax.lax.map(
        lambda t: _window_epsilon(_build_window(frozen, direction, t, log_delta, grid), log_delta, eps_ref), tilts
    )
    best = argmin(eps)
    return jnp.where(jnp.isfinite(eps[best]), tilts[best], jnp.nan)


def _rank_grid(grid):
    """The lattice the second pass ranks its tilts on: the coarse one (several times cheaper), or the solve's own."""
    return FAST_GRID if grid is None else grid


def epsilon_certified(comp, direction, log_delta, grid=None, screened=None):
    """Certified epsilon: the certified delta at it is at most ``exp(log_delta)``.

    The window is tilted at the saddle point of the saddle-point estimate of
    epsilon.  Where that fails, or the root lands more than ``REFINE_TOL``
    (relative) away from the estimate -- a few steps with a tiny sampling rate,
    whose bimodal "spike and slab" law the continuous saddle point places
    poorly -- the window is rebuilt at ``TILT_FACTORS`` times the saddle point of
    the root and at ``FALLBACK_TILT``, and solved again.  Every candidate is a
    verified upper bound, so the smallest is returned.  ``screened``: the screen's
    :class:`~jaxdp.accountants._bounds.ScreenStage` when the caller has it (its epsilon is one of the candidates,
    its estimate the window's first reference).  For concrete inputs the entry points run the same passes as
    programs of their own, the host between them (:func:`host_epsilon`).
    """
    st = _start(comp, direction, log_delta, screened)

    if grid is not None:
        eps1, eps2 = _passes_on_one_lattice(comp, direction, log_delta, grid, st)
        return _best_of_passes(comp, direction, log_delta, eps1, eps2, st.eps_sp)

    # Two passes of one traced solve: pass 1 at the saddle point of the estimate; pass 2, only where pass 1
    # failed or its root landed far from the estimate, at the tilt the coarse search ranks best.
    def one_pass(eps1, first):
        need2, ref = _second_pass_needed(eps1, st)
        need = first | need2
        t = jax.lax.cond(
            first,
            lambda r: st.t0,
            lambda r: jax.lax.cond(
                need,
                lambda r: _ranked_tilt(comp, direction, log_delta, r, _rank_grid(grid)),
                lambda _: jnp.asarray(jnp.nan, jnp.float64),
                r,
            ),
            ref,
        )
        t = jnp.where(need, t, jnp.nan)
        eps = _solve_or_inf(comp, direction, log_delta, grid, t, jnp.where(first, st.eps0, ref))
        return jnp.where(first, eps, eps1), eps

    _, (eps1, eps2) = jax.lax.scan(one_pass, jnp.asarray(jnp.inf, jnp.float64), jnp.array([True, False]))
    return _best_of_passes(comp, direction, log_delta, eps1, eps2, st.eps_sp)


def _passes_on_one_lattice(comp, direction, log_delta, grid, st: _Start):
    """``(eps1, eps2)`` of :func:`epsilon_certified`'s two passes where the tilt search runs on the solve's own
    lattice (``grid`` given, as for ``certified-fast``): then the search's windows and the solves are one function
    at different tilts, so all are the steps of one ``lax.scan`` -- pass 1, the ranked tilts, and the best again --
    with one traced window instead of two.

    The ranked tilts' steps take the composition and ``log_delta`` through ``stop_gradient`` (a failed tilt may have
    non-finite partials; a select keeps their zero cotangents from the rest), and only the last step, at the tilt
    ranked best, is differentiated: the values and derivatives are those of a search apart.
    """
    num_tilts = len(TILT_FACTORS) + 1
    nan = jnp.asarray(jnp.nan, jnp.float64)

    def step(carry, k):
        eps1, need, ref, tilts, ranked = carry
        first, last = k == 0, k == num_tilts + 1
        ranking = ~first & ~last
        best = argmin(ranked)
        t_best = jnp.where(jnp.isfinite(ranked[best]), tilts[best], nan)
        t_next = jnp.where(last, t_best, tilts[jnp.clip(k - 1, 0, num_tilts - 1)])
        t = jnp.where(first, st.t0, jnp.where(need, t_next, nan))
        frozen = jax.tree.map(lambda x: jnp.where(ranking, jax.lax.stop_gradient(x), x), (comp, log_delta))
        # (a ranked tilt is solved even where it is NaN, as a search apart solves each)
        run = jnp.where(ranking, need, jnp.isfinite(t))
        raw = jax.lax.cond(
            run,
            lambda c_ld, tt, e: _window_epsilon(_build_window(c_ld[0], direction, tt, c_ld[1], grid), c_ld[1], e),
            lambda c_ld, tt, e: nan,
            frozen,
            jnp.where(jnp.isfinite(t) | ranking, t, 1.0),
            jnp.where(first, st.eps0, ref),
        )
        eps = nan_to(raw, jnp.inf)
        # after pass 1: whether the search runs, its reference epsilon and tilts (the saddle point solved once)
        need1, ref1 = _second_pass_needed(eps, st)
        tilts = jax.lax.cond(
            first & need1, lambda r: _retry_tilts(comp, direction, r), lambda r: jnp.full(num_tilts, jnp.nan), ref1
        )
        carry = (
            jnp.where(first, eps, eps1),
            jnp.where(first, need1, need),
            jnp.where(first, ref1, ref),
            jnp.where(first, tilts, carry[3]),
            jnp.where(ranking & (jnp.arange(num_tilts) == k - 1), raw, ranked),
        )
        return carry, eps

    init = (nan, jnp.asarray(False), nan, jnp.full(num_tilts, jnp.nan), jnp.full(num_tilts, jnp.nan))
    (eps1, *_), eps = jax.lax.scan(step, init, jnp.arange(num_tilts + 2))
    return eps1, eps[-1]


def _best_of_passes(comp, direction, log_delta, eps1, eps2, eps_sp):
    best = jnp.minimum(eps1, eps_sp)
    best = jnp.minimum(jnp.minimum(best, eps2), _pure_dp_epsilon(comp, direction))
    if assumed().light:  # the Rényi-DP bound is the full program's (see _staging)
        return jnp.where(jnp.isfinite(best), jnp.maximum(best, 0.0), jnp.nan)
    # every bound failed: the Rényi-DP bound (its orders checked), else vacuous
    best = jax.lax.cond(
        jnp.isfinite(best),
        lambda b: b,
        lambda b: nan_to(_bounds.epsilon_rdp(comp, direction, log_delta), jnp.inf),
        best,
    )
    return jnp.maximum(best, 0.0)


# -- the search for concrete inputs: its passes as programs of their own, the host between them ---------------------
# Traced, the two passes are one program, and a query that needs only the first compiles the second too.  For
# concrete inputs the host runs pass 1 (one direction's program, the direction as data: both share it), then, where
# a direction needs it, the ranking (one program, FAST_GRID, for both methods) and the pass program at the ranked
# tilt.  The values are the traced program's: the same functions on the same inputs, the host taking minima and maxima.


class HostPass(NamedTuple):
    """One direction's pass for :func:`host_epsilon` (a program's output).

    Attributes:
      skipped: the screen's certified epsilon is at most ``worst`` (the direction cannot be the worse one; nothing
        else was computed).
      best: the smallest of the pass's window, the screen's certified epsilon and ``L_max`` (``inf`` where none
        holds).
      solved: the pass's window alone (``inf`` where it failed).
      need: after a first pass, whether the second runs; ``ref``: its reference epsilon.
      value: the direction's epsilon where no second pass follows (``max(best, 0)``; NaN where ``best`` is not
        finite): the next direction's ``worst``, given to its program before this one's result reaches the host.
      valid: the composition's parameters are in range and ``0 < delta < 1`` (else NaN, as the traced program: a
        mechanism rebuilt by pytree operations is never checked by its constructor).
    """

    skipped: jax.Array
    best: jax.Array
    solved: jax.Array
    need: jax.Array
    ref: jax.Array
    value: jax.Array
    valid: jax.Array


def pass_program(comp, flag, delta, worst, tilt, ref, *, direction=None, grid=None, facts=None) -> HostPass:
    """One direction's pass of :func:`epsilon_certified` at ``delta`` (concrete inputs; ``facts``: see ``_staging``):
    the first (``ref`` NaN: at the estimate's saddle point) or the second (at ``tilt``, with reference ``ref``).  The
    direction is ``flag`` (a boolean array, True: add) or the static ``direction``; ``worst``: the worse direction's
    epsilon so far (the screen skips this one where its certified epsilon is below it, as the traced program's)."""
    with assume(facts):
        d = direction if direction is not None else flag
        log_delta = jnp.log(delta)
        st = _start(comp, d, log_delta)
        given = jnp.isfinite(ref)

        def run(_):
            t = jnp.where(given, tilt, st.t0)
            solved = _solve_or_inf(comp, d, log_delta, grid, t, jnp.where(given, ref, st.eps0))
            need, ref1 = _second_pass_needed(solved, st)
            best = jnp.minimum(jnp.minimum(solved, st.eps_sp), _pure_dp_epsilon(comp, d))
            return best, solved, need, ref1

        skipped = st.stage.epsilon <= worst  # (NaN: computed, as in the traced program)
        nan = jnp.asarray(jnp.nan, jnp.float64)
        best, solved, need, ref1 = jax.lax.cond(~skipped, run, lambda _: (nan, nan, jnp.asarray(False), nan), None)
        value = jnp.where(jnp.isfinite(best), jnp.maximum(best, 0.0), jnp.nan)
        return HostPass(skipped, best, solved, need, ref1, value, valid_query(comp, delta, "delta"))


def rank_program(comp, flag, delta, ref, *, direction=None, grid=FAST_GRID, facts=None):
    """The second pass's tilt (NaN where no retried tilt succeeds), ranked on ``grid`` (:func:`_rank_grid` of the
    solve's: one program for both certified methods; concrete inputs, the arguments as for :func:`pass_program`)."""
    with assume(facts):
        d = direction if direction is not None else flag
        return _ranked_tilt(comp, d, jnp.log(delta), ref, grid)


_pass_jit = jax.jit(pass_program, static_argnames=("direction", "grid", "facts"))
_rank_jit = jax.jit(rank_program, static_argnames=("direction", "grid", "facts"))


def host_epsilon(comp, delta, *, grid, facts, call):
    """:func:`epsilon_certified`'s search of the worse direction for concrete inputs, as host-staged programs (see
    above); NaN where every bound of a direction failed (the full program, with its Renyi-DP bound, answers there).
    ``call(jitted, fn, args, static)`` runs a program (the entry points' compiled-program cache).

    The directions' first passes are dispatched together, the second given the first's ``value`` as its ``worst``
    (one wait for both); where the first direction then takes its second pass, its epsilon can only fall, and the
    second direction's pass runs again with it where the screen had skipped it."""
    scanned = comp.both_directions_as_data
    facts = dataclasses.replace(facts, light=True)
    nan = jnp.asarray(jnp.nan, jnp.float64)

    def first_pass(i, worst):
        return call(_pass_jit, pass_program, (comp, *_direction_args(comp, i, scanned), delta, worst, nan, nan), kw(i))

    def kw(i, **more):
        return {"direction": None if scanned else comp.directions[i], "grid": grid, "facts": facts, **more}

    pending, worst_given = [], jnp.asarray(-jnp.inf, jnp.float64)
    for i in range(len(comp.directions)):
        pending.append((worst_given, first_pass(i, worst_given)))
        worst_given = pending[-1][1].value
    given, results = jax.device_get(([w for w, _ in pending], [r for _, r in pending]))
    if not all(bool(r.valid) for r in results):
        return nan
    worst = -np.inf
    for i, r in enumerate(results):
        if i > 0 and bool(r.skipped) and not float(given[i]) == worst:
            # (the first direction took its second pass, and its value fell below the one this pass was given: the
            # screen may not skip this direction now; a pass that ran is the same under any worst)
            r = jax.device_get(first_pass(i, jnp.asarray(worst, jnp.float64)))
        if bool(r.skipped):
            continue
        best = float(r.best)
        if bool(r.need):
            args = (comp, *_direction_args(comp, i, scanned), delta)
            tilt = call(_rank_jit, rank_program, (*args, r.ref), kw(i, grid=_rank_grid(grid)))
            if np.isfinite(float(tilt)):
                second = call(_pass_jit, pass_program, (*args, jnp.asarray(-jnp.inf, jnp.float64), tilt, r.ref), kw(i))
                best = min(best, float(second.solved))
        if not np.isfinite(best):
            return nan
        worst = max(worst, max(best, 0.0))
    return jnp.asarray(worst, jnp.float64)


def _direction_args(comp, i, scanned):
    """``(flag,)``: the ``i``-th direction as data where both run through one program, else ``(None,)`` (static)."""
    return (jnp.asarray(is_add(comp.directions[i])),) if scanned else (None,)


def _supported(comp: Composition) -> bool:
    return all(isinstance(m, (Gaussian, MixtureMechanism)) for m in comp.mechanisms)


METHODS = (
    screened(
        MethodInfo(
            "certified",
            certified=True,
            description="pessimistic lattice PLD composed by FFT in the tilted domain (proven upper bound, tight)",
            log_delta=log_delta_certified,
            epsilon=epsilon_certified,
            supports=_supported,
        ),
        by="delta2-certified",
        screen_stage=_bounds.screen_stage,
        epsilon_given_screen=lambda c, d, a, s: epsilon_certified(c, d, a, screened=s),
    ),
    screened(
        MethodInfo(
            "certified-fast",
            certified=True,
            description="certified on an 8x coarser lattice (proven; ~1e-4 looser, ~1e-3 at eps < 0.01; 6x faster)",
            log_delta=functools.partial(log_delta_certified, grid=FAST_GRID),
            epsilon=functools.partial(epsilon_certified, grid=FAST_GRID),
            supports=_supported,
        ),
        by="delta2-certified",
        screen_stage=_bounds.screen_stage,
        epsilon_given_screen=lambda c, d, a, s: epsilon_certified(c, d, a, grid=FAST_GRID, screened=s),
    ),
)

#: how the entry points may compile these (see :class:`~jaxdp.accountants._registry.CompileHints`): under
#: ``Facts.light`` the Renyi-DP bound is left out (the full program's, where every other bound failed); for concrete
#: inputs the epsilon search runs as host-staged programs (:func:`host_epsilon`); the XLA options that shorten the
#: compile of chains of special functions
HINTS = {
    info.name: CompileHints(staged=True, quick_compile=True, host_epsilon=functools.partial(host_epsilon, grid=grid))
    for info, grid in zip(METHODS, (None, FAST_GRID))
}
