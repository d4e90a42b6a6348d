"""Root finding and 1-D minimisation that jit, vmap and differentiate.

``solve_decreasing`` finds the root of a decreasing scalar function on a
bracket with a safeguarded Newton iteration: a Newton step is taken only when
it stays strictly inside the current bracket, otherwise the bracket is
bisected.  The loop is a ``lax.while_loop`` with a static iteration budget and
a tolerance -- no Python control flow on traced values.  The derivative of the
root with respect to anything the function closes over is given by the
implicit function theorem (a ``custom_jvp`` of the closure-converted function, :mod:`._implicit`),
not by unrolling the iterations.
"""

from __future__ import annotations

import jax
import jax.extend
import jax.numpy as jnp

from jaxdp.numerics._implicit import _hoisted, _root_with_implicit_derivative, _value_with_derivative
from jaxdp.numerics._logspace import argmin, nan_to

__all__ = [
    "bisect",
    "bracketed_log_newton",
    "bracketed_newton",
    "bracketed_secant",
    "minimize_on_grid",
    "safeguarded_newton",
    "solve_decreasing",
    "with_slope",
]


def bisect(root_above, a, b, iterations: int):
    """The bracket ``(a, b)`` after ``iterations`` bisections: at each midpoint ``m``, ``a = m`` where
    ``root_above(m)`` (a boolean array: the root lies above ``m``), else ``b = m``.

    For a fixed number of halvings where a root must be bracketed robustly and cheaply (a starting point, a
    sampler's tilt); the predicate decides what a NaN at ``m`` means.  Not differentiated: callers stop the
    gradient or use an implicit rule.
    """

    def body(_, ab):
        a, b = ab
        m = 0.5 * (a + b)
        up = root_above(m)
        return jnp.where(up, m, a), jnp.where(up, b, m)

    return jax.lax.fori_loop(0, iterations, body, (a, b))


def bracketed_log_newton(value_and_slope, log_target, lo, hi, x0, *, max_iterations: int, xtol=1e-12, btol=1e-13):
    """``x`` with ``log f(x) = log_target`` for a decreasing ``f >= 0`` on ``[lo, hi]``: Newton on ``log f`` from
    ``x0`` with the caller's slope (``value_and_slope(x) -> (f, f')``: a sum over samples gives both in one pass,
    no derivative traced), a bisection where a step leaves the bracket or ``f`` is 0.  Stops after
    ``max_iterations``, or where the step is below ``xtol`` or the bracket below ``btol`` (relative to
    ``1 + |x|``).  Returns the last iterate.  Not differentiated: callers stop the gradient or use an implicit
    rule."""

    def body(state):
        i, a, b, x, _ = state
        s, ds = value_and_slope(x)
        above = s >= jnp.exp(log_target)
        a = jnp.where(above, x, a)
        b = jnp.where(above, b, x)
        step = (jnp.log(jnp.maximum(s, 1e-300)) - log_target) / jnp.where(ds < 0, ds / jnp.maximum(s, 1e-300), -1.0)
        x_new = x - step
        ok = (s > 0) & jnp.isfinite(x_new) & (x_new > a) & (x_new < b)
        x_next = jnp.where(ok, x_new, 0.5 * (a + b))
        return i + 1, a, b, x_next, jnp.abs(x_next - x)

    def more(state):
        i, a, b, x, moved = state
        return (i < max_iterations) & (moved > xtol * (1.0 + jnp.abs(x))) & (b - a > btol * (1.0 + jnp.abs(x)))

    init = (0, lo, hi, jnp.clip(x0, lo, hi), jnp.asarray(jnp.inf))
    return jax.lax.while_loop(more, body, init)[3]


def bracketed_newton(
    g,
    lo,
    hi,
    x0,
    *,
    max_iterations: int = 80,
    xtol: float = 1e-11,
    max_jump: float = jnp.inf,
):
    """Safeguarded Newton for a decreasing ``g`` with ``g(lo) >= 0 >= g(hi)``.

    The safeguard is that of ``rtsafe`` (Numerical Recipes): the bracket is
    bisected whenever the Newton step leaves it or fails to halve the step
    before last, so far-off starting points cost a few bisections instead of
    many short Newton steps.

    Stops when the step or the bracket falls below ``xtol`` (relative) or
    ``g == 0``.  ``max_jump`` caps the distance of a bisection step from the
    current iterate (useful when the initial bracket is much wider than the
    error of the starting point).

    A non-finite ``g(x)`` is never read as a direction (``NaN > 0`` is False,
    which would move the bracket down): the iteration stops there and returns
    ``x = NaN``, so the caller sees that the function could not be evaluated.

    Returns ``(x, a, b, iterations)``: the last iterate, the final bracket
    ``[a, b]`` with ``g(a) > 0 >= g(b)`` (as far as the iterations established
    it) and the number of iterations.
    """

    def cond(state):
        i, _, _, _, _, done = state
        return (i < max_iterations) & ~done

    def body(state):
        i, a, b, x, dx_old, _ = state
        gx, dgx = jax.jvp(g, (x,), (jnp.ones_like(x),))
        bad = ~jnp.isfinite(gx)
        a = jnp.where(gx > 0, x, a)
        b = jnp.where((gx > 0) | bad, b, x)
        step = gx / dgx
        newton = x - step
        ok = jnp.isfinite(newton) & (newton >= a) & (newton <= b) & (2.0 * jnp.abs(step) <= jnp.abs(dx_old))
        mid = jnp.clip(0.5 * (a + b), x - max_jump, x + max_jump)
        x_new = jnp.where(ok, newton, mid)
        converged = gx == 0
        x_new = jnp.where(converged, x, x_new)
        x_new = jnp.where(bad, jnp.nan, x_new)
        tol = xtol * (1.0 + jnp.abs(x))
        done = (jnp.abs(x_new - x) <= tol) | (b - a <= tol) | converged | bad
        return i + 1, a, b, x_new, jnp.abs(x_new - x), done

    state = (jnp.array(0), lo, hi, jnp.clip(x0, lo, hi), 2.0 * (hi - lo), jnp.array(False))
    i, a, b, x, _, _ = jax.lax.while_loop(cond, body, state)
    return x, a, b, i


def bracketed_secant(g, lo, hi, x0, slope0, *, max_iterations: int = 40, xtol: float = 1e-10, max_jump=jnp.inf):
    """Safeguarded secant iteration for a decreasing ``g`` on ``[lo, hi]`` from ``x0``, the first step taken
    with the slope estimate ``slope0 < 0`` (a cheaper approximation's derivative, say).

    One evaluation of ``g`` per iteration and no derivative (for a ``g`` whose forward-mode derivative
    costs several evaluations).  A step that leaves the established bracket, or fails to halve the step
    before last, is replaced by a bisection (capped at ``max_jump`` from the iterate).  A non-finite
    ``g`` stops the iteration with ``x = NaN``, as in :func:`bracketed_newton`.

    Returns ``(x, a, b, iterations)``.
    """
    x0 = jnp.clip(x0, lo, hi)
    g0 = g(x0)
    a = jnp.where(g0 > 0, x0, lo)
    b = jnp.where(g0 > 0, hi, x0)

    def cond(state):
        return (state[0] < max_iterations) & ~state[-1]

    def body(state):
        i, a, b, xp, gp, x, dx_old, _ = state
        gx = g(x)
        bad = ~jnp.isfinite(gx) | ~jnp.isfinite(gp)
        a = jnp.where(gx > 0, x, a)
        b = jnp.where((gx > 0) | bad, b, x)
        slope = (gx - gp) / (x - xp)
        step = gx / slope
        sec = x - step
        ok = jnp.isfinite(sec) & (slope < 0) & (sec >= a) & (sec <= b) & (2.0 * jnp.abs(step) <= jnp.abs(dx_old))
        mid = jnp.clip(0.5 * (a + b), x - max_jump, x + max_jump)
        x_new = jnp.where(ok, sec, mid)
        converged = gx == 0
        x_new = jnp.where(converged, x, x_new)
        x_new = jnp.where(bad, jnp.nan, x_new)
        tol = xtol * (1.0 + jnp.abs(x))
        done = (jnp.abs(x_new - x) <= tol) | (b - a <= tol) | converged | bad
        return i + 1, a, b, x, gx, x_new, jnp.abs(x_new - x), done

    first = x0 - g0 / jnp.where(slope0 < 0, slope0, -1.0)
    x1 = jnp.clip(jnp.where(jnp.isfinite(first), jnp.clip(first, x0 - max_jump, x0 + max_jump), x0), a, b)
    x1 = jnp.where(x1 == x0, x0 + jnp.where(g0 > 0, 1e-6, -1e-6) * (1.0 + jnp.abs(x0)), x1)
    state = (jnp.array(1), a, b, x0, g0, x1, 2.0 * (hi - lo), (g0 == 0) | ~jnp.isfinite(g0))
    i, a, b, _, _, x, _, _ = jax.lax.while_loop(cond, body, state)
    x = jnp.where(g0 == 0, x0, x)
    return x, a, b, i


def solve_decreasing(
    f,
    lo,
    hi,
    *,
    x0=None,
    max_iterations: int = 80,
    max_jump: float = jnp.inf,
    slope0=None,
    solver=None,
):
    """Root of a decreasing ``f`` on ``[lo, hi]`` (``f(lo) >= 0 >= f(hi)`` assumed).

    Bracketed Newton by default; given a first slope estimate ``slope0``, the bracketed secant iteration
    (:func:`bracketed_secant`: no derivative of ``f`` in the solve, one at the root for the gradient), or the
    caller's ``solver(x0) -> root`` (its iterations are not differentiated either).

    Differentiable (implicit function theorem) in whatever ``f`` closes over.
    If ``f(lo) < 0`` the result is ``lo``; if ``f(hi) > 0`` it is ``hi`` (a constant: its
    derivative is zero, where the implicit one would be meaningless and often non-finite).
    """
    lo = jax.lax.stop_gradient(lo)
    hi = jax.lax.stop_gradient(hi)
    start = 0.5 * (lo + hi) if x0 is None else jax.lax.stop_gradient(x0)

    def solve(g, x_init):
        if solver is not None:  # the caller's own iteration (``x_init -> root``), with this implicit derivative
            return solver(x_init)
        if slope0 is not None:
            s0 = jax.lax.stop_gradient(slope0)
            x, _, _, _ = bracketed_secant(g, lo, hi, x_init, s0, max_iterations=max_iterations, max_jump=max_jump)
            return x
        x, _, _, _ = bracketed_newton(g, lo, hi, x_init, max_iterations=max_iterations, max_jump=max_jump)
        return x

    x = _root_with_implicit_derivative(f, start, solve)
    tol = 1e-9 * (1.0 + jnp.abs(hi - lo))
    edge = jax.lax.stop_gradient((x <= lo + tol) | (x >= hi - tol))
    return jnp.where(edge, jax.lax.stop_gradient(x), x)


def minimize_on_grid(f, grid, *, width: int = 8, refine_rounds: int = 12):
    """Minimum of scalar ``f`` over a 1-D grid, refined around the best grid point.

    ``f`` is evaluated ``width`` points at a time (vectorised) in ONE loop, whose body is the only copy of ``f`` in
    the program: first the grid, ``width`` points per iteration, then ``refine_rounds`` rounds that each place
    ``width / 2`` evenly spaced points on either side of the best point so far, inside the bracket of its two
    neighbours; the bracket shrinks ``width / 2 + 1``-fold per round (12 rounds of 8: 4e-9 of a grid cell).  The
    smallest value evaluated is returned, so any grid point, evaluated or refined, bounds it from above.  The location
    is held fixed for differentiation (envelope theorem), so gradients are ``df/dparams`` at the minimiser; that
    derivative is a ``custom_jvp`` rule, compiled only where a derivative is asked for.

    Returns ``(value, argmin)``.
    """
    grid = jnp.asarray(grid)
    dtype = jnp.result_type(grid)
    n = grid.shape[0]
    half = width // 2
    chunks = -(-n // width)
    # (the last chunk padded with the last grid point: evaluated twice, never better than itself)
    padded = jnp.concatenate([grid, jnp.broadcast_to(grid[-1], (chunks * width - n,))])
    frac = jnp.arange(1, half + 1, dtype=dtype) / (half + 1)

    def values(xs):
        raw = jax.vmap(lambda x: jax.lax.stop_gradient(f(x)))(xs).astype(dtype)
        return raw, nan_to(raw, jnp.inf)

    def body(k, state):
        bx, bv, a, b, raw0 = state
        in_grid = k < chunks
        g_pts = jax.lax.dynamic_slice_in_dim(padded, jnp.minimum(k, chunks - 1) * width, width)
        left = bx - (bx - a) * frac  # nearest the best first
        right = bx + (b - bx) * frac
        r_pts = jnp.concatenate([left[::-1], right])
        raw, vals = values(jnp.where(in_grid, g_pts, r_pts))
        # the grid: the best point so far and its neighbours (the bracket the refinement starts from)
        j = argmin(vals)
        g_better = vals[j] < bv
        i = jnp.minimum(k * width + j, n - 1)
        g_x = jnp.where(g_better, g_pts[j], bx)
        g_v = jnp.where(g_better, vals[j], bv)
        g_a = jnp.where(g_better, grid[jnp.maximum(i - 1, 0)], a)
        g_b = jnp.where(g_better, grid[jnp.minimum(i + 1, n - 1)], b)
        # a refinement round: the best of the points around it (its bracket ends never are: they bound it)
        seq = jnp.concatenate([a[None], left[::-1], bx[None], right, b[None]])
        no = jnp.full((1,), jnp.inf, dtype)
        seq_v = jnp.concatenate([no, vals[:half], bv[None], vals[half:], no])
        jj = argmin(seq_v)
        r_better = seq_v[jj] < bv
        r_x = jnp.where(r_better, seq[jj], bx)
        r_v = jnp.where(r_better, seq_v[jj], bv)
        at = jnp.where(r_better, jj, half + 1)
        r_a, r_b = seq[jnp.maximum(at - 1, 0)], seq[jnp.minimum(at + 1, 2 * half + 2)]
        raw0 = jnp.where(k == 0, raw[0], raw0)
        pick = lambda u, v: jnp.where(in_grid, u, v)  # noqa: E731
        return pick(g_x, r_x), pick(g_v, r_v), pick(g_a, r_a), pick(g_b, r_b), raw0

    inf = jnp.asarray(jnp.inf, dtype)
    init = (grid[0], inf, grid[0], grid[jnp.minimum(1, n - 1)], inf)  # (the first grid point's bracket)
    x_best, best, _, _, raw0 = jax.lax.fori_loop(0, chunks + refine_rounds, body, init)
    # (nothing finite: the first grid point's own value, NaN or infinite)
    value = jnp.where(jnp.isfinite(best), best, raw0)
    x_best = jax.lax.stop_gradient(x_best)
    # the value f(x_best) from the evaluations already made; its derivative (envelope theorem: f's partials in
    # what it closes over, at x_best) traced only where one is asked for -- not through the grid's values, whose
    # reverse pass would sum every grid point's partials (0 x inf = NaN where f is infinite off the minimum)
    f_pure, consts = _hoisted(f, x_best)
    return _value_with_derivative(f_pure, jax.lax.stop_gradient(value), x_best, consts), x_best


def safeguarded_newton(vsa, lo, hi, x0, ftol, xtol=0.0, max_iterations=60):
    """Root of a decreasing ``g`` on ``[lo, hi]``: Newton, bisection when a step leaves the bracket.

    ``vsa(x)`` returns ``(g(x), g'(x), aux)``.  Stops when ``|g| <= ftol`` (here ``g`` is a log of
    ``-log delta``: ``ftol`` is a relative accuracy of ``log delta``), when a Newton step inside
    the bracket is at most ``xtol`` (the step is taken: Newton's error after it is of the order
    of its square), or when the bracket is below 1e-13.  Returns ``(x, iterations, last)`` with
    ``last = (x, g, g', aux)`` of the last evaluation.
    """

    def cond(state):
        i, _, a, b, done, _ = state
        return (i < max_iterations) & ~done & (b - a > 1e-13 * (1.0 + jnp.abs(a)))

    def body(state):
        i, x, a, b, _, _ = state
        gx, dg, aux = vsa(x)
        a = jnp.where(gx > 0, x, a)
        b = jnp.where(gx > 0, b, x)
        newton = x - gx / dg
        ok = jnp.isfinite(newton) & (newton > a) & (newton < b)
        converged = jnp.abs(gx) <= ftol
        small = ok & (jnp.abs(newton - x) <= xtol)
        x_new = jnp.where(converged, x, jnp.where(ok, newton, 0.5 * (a + b)))
        return i + 1, x_new, a, b, converged | small, (x, gx, dg, aux)

    x0 = jnp.clip(x0, lo, hi)
    nan = jnp.full_like(x0, jnp.nan)
    last = (x0, nan, nan, nan)
    lo, hi = jnp.asarray(lo, x0.dtype), jnp.asarray(hi, x0.dtype)
    i, x, _, _, _, last = jax.lax.while_loop(cond, body, (0, x0, lo, hi, jnp.asarray(False), last))
    return x, i, last


def with_slope(g):
    """``x -> (g(x), g'(x), 0)``: the form :func:`safeguarded_newton` takes."""

    def vsa(x):
        value, slope = jax.jvp(g, (x,), (jnp.ones_like(x),))
        return value, slope, jnp.zeros_like(value)

    return vsa
