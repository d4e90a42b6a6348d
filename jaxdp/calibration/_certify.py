"""The certified check of a calibration: the smallest move of the estimate's answer whose certified epsilon is within
budget.  One set of steps serves both searches: traced (``xp = jax.numpy``, a ``lax.while_loop``) and on the host
(``xp = numpy``, a Python loop over the accountants' per-query programs), so that the two cannot drift apart."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.calibration._result import CERTIFY_ROUNDS, CERTIFY_XTOL


def _loop(cond, body, state, xp):
    if xp is jnp:
        return jax.lax.while_loop(cond, body, state)
    with np.errstate(all="ignore"):  # (inf and NaN as float64 arithmetic gives them, as in the traced loop)
        while cond(state):
            state = body(state)
    return state


def _evaluate(eps_cert, x, xp):
    """``eps_cert(x)``; on the host with a Python float (the per-query programs' argument) and back as float64."""
    return eps_cert(x) if xp is jnp else np.float64(eps_cert(float(x)))


def _f64(value, xp):
    return jnp.asarray(value, jnp.float64) if xp is jnp else np.float64(value)


def _out(result, xp):
    """``(value, eps, evaluations, ok)``; on the host as Python numbers."""
    if xp is jnp:
        return result
    value, eps, evaluations, ok = result
    return float(value), float(eps), int(evaluations), bool(ok)


def _gap(e, target, xp):
    """The log-gap ``log e - log target``; 1 for a non-finite epsilon."""
    return xp.where(xp.isfinite(e), xp.log(xp.maximum(e, 0.0)) - xp.log(target), 1.0)


def certify_shift(eps_cert, x, target, max_x, nudge, xp=jnp):
    """The smallest ``x' >= x`` (to ``max(CERTIFY_XTOL, nudge)``) whose certified epsilon is at most ``target``.

    ``x`` is a log parameter along which epsilon decreases.  The first evaluation is at
    ``x + nudge`` (usually enough: the nudge is about the check's slack).  While it fails, the
    step grows (1.5x the log-gap, at least doubling); once a passing point is known, the
    bracket ``[failing, passing]`` is narrowed by safeguarded secant steps on the log-gap.
    Only passing points are returned.  Returns ``(x', certified eps, evaluations, ok)``.
    """
    xtol = xp.maximum(CERTIFY_XTOL, nudge) + 1e-12

    def cond(state):
        i, a, _, b, _, have_b = state
        narrow = have_b & (b - a <= xtol)
        return (i < CERTIFY_ROUNDS) & ~narrow

    def body(state):
        i, a, ga, b, eb, have_b = state
        grow = a + xp.maximum(1.5 * ga, nudge * 2.0**i)
        gb = _gap(eb, target, xp)
        w = xp.clip(ga / xp.where(ga - gb > 0, ga - gb, 1.0), 0.1, 0.9)  # secant, kept inside the bracket
        x_new = xp.where(have_b, a + w * (b - a), xp.where(i == 0, a + nudge, grow))
        x_new = xp.minimum(x_new, max_x)
        e = _evaluate(eps_cert, x_new, xp)
        ok = e <= target
        a = xp.where(ok, a, x_new)
        ga = xp.where(ok, ga, _gap(e, target, xp))
        b = xp.where(ok, x_new, b)
        eb = xp.where(ok, e, eb)
        return i + 1, a, ga, b, eb, have_b | ok

    state = (0, _f64(x, xp), _f64(0.0, xp), _f64(max_x, xp), _f64(np.inf, xp), xp.asarray(False))
    i, _, _, b, eb, have_b = _loop(cond, body, state, xp)
    return _out((b, eb, i, have_b), xp)


def largest_certified_count(eps_cert, n, target, max_steps, xp=jnp, rounds=CERTIFY_ROUNDS):
    """The largest whole count ``m <= max_steps`` whose certified epsilon ``eps_cert(m)`` is at most ``target``.

    Epsilon increases with the count; ``n`` (the estimate's answer) is checked first.  A bracket
    ``lo < hi`` of a passing and a failing count (``0`` and ``max_steps + 1`` while none is known)
    is narrowed until the two are consecutive: below a failing count, or above a passing one, by
    the measured gap (epsilon grows at least like ``sqrt(steps)`` in this regime, so a move of
    1.5 x 2 x gap x count crosses the target); between the two, by secant steps on the log-gap in
    ``log count`` (epsilon is close to a power of the count there).  Usually two evaluations:
    ``n``, then ``n + 1``.  Returns ``(count, certified eps, evaluations, ok)``: the largest passing
    count found; 0 when even one step fails; the smallest failing count, with ``ok`` false, when
    none passed within ``rounds`` (on the host, the estimate's own search for its largest count runs these
    steps too, with more rounds, from the Gaussian pair's count).
    """

    def cond(state):
        i, lo, _, hi, _ = state
        return (i < rounds) & (hi - lo > 1)

    def body(state):
        i, lo, e_lo, hi, e_hi = state
        g_lo, g_hi = _gap(e_lo, target, xp), _gap(e_hi, target, xp)
        down = hi - xp.maximum(1.0, xp.ceil(-hi * xp.expm1(-3.0 * g_hi)))
        up = lo + xp.maximum(1.0, xp.ceil(lo * xp.expm1(-3.0 * g_lo)))
        w = -g_lo / (g_hi - g_lo)
        w = xp.where(xp.isfinite(w) & xp.isfinite(e_hi), w, 0.5)  # bisection where a gap is not measured
        log_lo = xp.log(xp.maximum(lo, 1.0))
        secant = xp.floor(xp.exp(log_lo + w * (xp.log(hi) - log_lo)))
        m = xp.where(lo < 1, down, xp.where(hi > max_steps, up, secant))
        m = xp.clip(xp.where(i == 0, n, m), lo + 1, hi - 1)
        e = _evaluate(eps_cert, m, xp)
        ok = e <= target
        return i + 1, xp.where(ok, m, lo), xp.where(ok, e, e_lo), xp.where(ok, hi, m), xp.where(ok, e_hi, e)

    state = (0, _f64(0.0, xp), _f64(np.inf, xp), max_steps + _f64(1.0, xp), _f64(np.inf, xp))
    i, lo, e_lo, hi, e_hi = _loop(cond, body, state, xp)
    found = lo >= 1
    count = xp.where(found, lo, xp.where(hi <= 1, 0.0, hi))
    return _out((count, xp.where(found, e_lo, e_hi), i, found), xp)
