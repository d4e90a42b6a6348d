"""Searches on the host, in plain Python numbers: the calibrators', the tracker's and the group curve's searches
over the accountants' per-query programs (each evaluation a compiled program's answer, so each is counted, and none
is traced).  The traced solvers are in :mod:`jaxdp.numerics._solvers`."""

from __future__ import annotations

import math

__all__ = ["host_bisect", "host_largest_satisfying", "host_regula_falsi", "host_secant_root"]


def host_bisect(root_below, lo, hi, iterations=100):
    """The midpoint of ``[lo, hi]`` after ``iterations`` halvings: each keeps the half below the midpoint where
    ``root_below(mid)`` holds, else the half above."""
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if root_below(mid):
            hi = mid
        else:
            lo = mid
    return 0.5 * (lo + hi)


def host_secant_root(g, lo, hi, x0, *, slope, xtol, max_evaluations):
    """Root of the decreasing ``g`` on ``[lo, hi]``: secant steps (the first by the guessed ``slope``), none longer
    than 2, each kept strictly inside the bracket of the points evaluated so far (a bisection, or a step of 2 away
    from the one side known, where it is not, or where ``g`` is not finite: NaN reads as positive).  Stops once a
    secant step is at most ``xtol`` (the step is taken: the secant's error after it is far smaller).

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


def host_largest_satisfying(ok, guess, limit):
    """The largest integer ``n`` in ``[1, limit]`` with ``ok(n)`` (0 where ``ok(1)`` fails), for an ``ok`` that holds
    up to some ``n`` and fails above it: from ``guess``, steps doubling up or down until the two sides are
    bracketed, then a bisection.  ``ok`` holds at the result and fails one above it (or the result is ``limit``)."""
    if ok(guess):
        lo, hi, step = guess, None, 1
        while hi is None:  # gallop up
            cand = min(lo + step, limit)
            if cand == lo:
                return lo
            if ok(cand):
                lo, step = cand, step * 2
            else:
                hi = cand
    else:
        lo, hi, step = None, guess, 1
        while lo is None:  # gallop down
            cand = hi - step
            if cand < 1:
                if not ok(1):
                    return 0
                lo = 1
            elif ok(cand):
                lo = cand
            else:
                hi, step = cand, step * 2
    while hi - lo > 1:  # invariant: ok(lo), not ok(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def host_regula_falsi(f, lo, hi, f_lo, f_hi, *, rtol, max_evaluations):
    """The upper end of a bracket ``[lo, hi]`` of the decreasing ``f`` (``f(lo) > 0 >= f(hi)``, given as ``f_lo``,
    ``f_hi``) shrunk to a relative width of ``rtol``: regula falsi steps kept away from the ends (a step that would
    hug one moves it by at least a tenth of the width: plain regula falsi stalls at one end of a curved function),
    bisections where the values say nothing.  A NaN ``f`` reads as positive (the condition is not shown there).
    ``f(result) <= 0`` wherever ``f_hi`` was."""
    for _ in range(max_evaluations):
        if hi - lo <= rtol * hi:
            break
        w = hi - lo
        x = lo + 0.5 * w
        if math.isfinite(f_lo) and math.isfinite(f_hi) and f_lo > f_hi:
            x = lo + w * f_lo / (f_lo - f_hi)
        x = min(max(x, lo + 0.1 * w), hi - 0.1 * w) if w > 4.0 * rtol * hi else lo + 0.5 * w
        fx = f(x)
        if fx <= 0.0:
            hi, f_hi = x, fx
        else:
            lo, f_lo = x, (fx if math.isfinite(fx) else math.inf)
    return hi
