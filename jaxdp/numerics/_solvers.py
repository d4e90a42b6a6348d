"""Root finding and 1-D minimisation that jit, vmap and differentiate.

``solve_decreasing`` finds the root of a decreasing scalar function on a
bracket with a safeguarded Newton iteration: a Newton step is taken only when
it stays strictly inside the current bracket, otherwise the bracket is
bisected.  The loop is a ``lax.while_loop`` with a static iteration budget and
a tolerance -- no Python control flow on traced values.  The derivative of the
root with respect to anything the function closes over is given by the
implicit function theorem (a ``custom_jvp`` of the closure-converted function),
not by unrolling the iterations.
"""

from __future__ import annotations

import jax
import jax.extend
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from jaxdp.numerics._logspace import argmin, nan_to
from jaxdp.numerics._pytree import zeros_of

__all__ = [
    "bisect",
    "bracketed_newton",
    "bracketed_secant",
    "implicit_root",
    "minimize_on_grid",
    "root_and_value_found_elsewhere",
    "root_found_elsewhere",
    "safeguarded_newton",
    "solve_decreasing",
    "value_found_elsewhere",
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


def _hoisted(fn, *example_args, all_outputs=False):
    """``(pure, consts)`` with ``pure(*args, *consts) == fn(*args)``: every value ``fn`` closes over is an argument
    (``pure`` returns ``fn``'s first output, or all of them as a tuple where ``all_outputs``).

    Unlike ``jax.closure_convert``, which hoists only the values that may carry a tangent, integer and boolean
    tracers are hoisted too: a ``custom_jvp`` rule that closes over a tracer leaks it when JAX traces the rule again
    later (the JVP of a ``scan`` body that holds the rule: "No constant handler for type: DynamicJaxprTracer").
    """
    closed = jax.make_jaxpr(fn)(*example_args)
    jaxpr, n_args = closed.jaxpr, len(example_args)

    def pure(*args_and_consts):
        args, consts = args_and_consts[:n_args], args_and_consts[n_args:]
        out = jax.extend.core.jaxpr_as_fun(jax.extend.core.ClosedJaxpr(jaxpr, list(consts)))(*args)
        return tuple(out) if all_outputs else out[0]

    return pure, list(closed.consts)


def _root_with_implicit_derivative(f, start, solve):
    """``solve(f, start)``, a root of the scalar ``f``, with the derivative the implicit function theorem gives in
    whatever ``f`` closes over: ``dx = -(df/dparams . dparams) / (df/dx)`` (zero where ``df/dx`` is 0 or not finite).

    :func:`implicit_root` (a ``custom_jvp``) of the hoisted ``f`` rather than ``jax.lax.custom_root``: from JAX 0.12
    custom_root differentiates ``f`` lazily, when the user's transformation is lowered, and by then the float64 scope
    of a call traced with x64 off has closed (``lax.mul requires arguments to have the same dtypes, got float64,
    float32``); a ``custom_jvp`` rule is traced where the derivative is asked for, inside the scope.  The iterations
    are not differentiated (the solve sees constants).
    """
    start = jax.lax.stop_gradient(start)
    # f's Python traced once: the iteration and the derivative's rule both evaluate its jaxpr (a caller's own
    # ``solver`` iterates on whatever it closes over, f included, which it traces itself)
    f_pure, consts = _hoisted(f, start)
    held = [jax.lax.stop_gradient(c) for c in consts]
    # the iteration runs on constants: what it closes over (f's parameters, a caller's own solver) is held fixed,
    # so no tangent enters its loop (reverse mode cannot go through a while_loop)
    solve_pure, solve_consts = _hoisted(lambda x0: solve(lambda v: f_pure(v, *held), x0), start)
    x_star = solve_pure(start, *(jax.lax.stop_gradient(c) for c in solve_consts))
    return implicit_root(lambda u, _, params: f_pure(u, *params), None, x_star, tuple(consts))


def root_found_elsewhere(f, x, lo, hi):
    """``x``, a root of the decreasing scalar ``f`` on ``[lo, hi]`` that the caller found in an iteration of its own
    (one shared with other work), with the implicit derivative :func:`solve_decreasing` gives its root.

    ``f`` is traced to a jaxpr here, but enters the program only where a derivative is asked for.  As there, a root
    at the bracket's edge is a constant.
    """
    return root_and_value_found_elsewhere(lambda v: (f(v), jnp.zeros_like(v)), x, jnp.zeros_like(x), lo, hi)[0]


_CLOSED_OVER = object()


def root_and_value_found_elsewhere(f, x, value, lo, hi, operands=_CLOSED_OVER):
    """``(x, value)``: ``x`` a root of the decreasing scalar ``f(.)[0]`` on ``[lo, hi]`` and ``value = f(x)[1]``,
    both found by the caller in an iteration of its own, with their derivatives in whatever ``f`` closes over:
    ``dx = -(df0/dparams . dparams) / (df0/dx)`` (a constant at the bracket's edge, as in :func:`solve_decreasing`)
    and ``dvalue = df1/dx dx + df1/dparams . dparams``.

    ``f`` enters the program only where a derivative is asked for, linearised once for both (:func:`_partials`):
    the root's move and the value's derivative share one primal of ``f``.  ``operands`` (a pytree): ``f`` is called
    as ``f(v, *operands)`` and closes over no tracer, so it is not traced at all unless a derivative is asked for;
    without them ``f(v)`` is traced to a jaxpr here, to find the values it closes over.
    """
    x = jax.lax.stop_gradient(x)
    if operands is _CLOSED_OVER:
        f_pure, consts = _hoisted(f, x, all_outputs=True)
    else:
        consts, tree = jax.tree.flatten(operands)

        def f_pure(v, *leaves):
            return tuple(f(v, *jax.tree.unflatten(tree, leaves)))

    tol = 1e-9 * (1.0 + jnp.abs(hi - lo))
    edge = jax.lax.stop_gradient((x <= lo + tol) | (x >= hi - tol))

    @jax.custom_jvp
    def known(x, value, edge, consts):
        del edge, consts
        return x, value

    def known_jvp(primals, tangents):
        x, value, edge, consts = primals
        (g_x, v_x), (g_p, v_p) = _partials(lambda v, c: f_pure(v, *c), x, consts, tangents[3])
        dx = jnp.where(edge, 0.0, _implicit_step(g_x, g_p))
        return (x, value), (dx, v_x * dx + v_p)

    known.defjvp(known_jvp, symbolic_zeros=True)
    return known(x, jax.lax.stop_gradient(value), edge, list(consts))


def value_found_elsewhere(f, value, x):
    """``value``, which is ``f(x)`` computed elsewhere (in a shared iteration), with the derivative of ``f(x)`` in
    ``x`` and in whatever ``f`` closes over; ``f`` enters the program only where a derivative is asked for."""
    f_pure, consts = _hoisted(f, x)
    return _value_with_derivative(f_pure, value, x, consts, in_x=True)


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


def _value_with_derivative(f_pure, value, x, consts, *, in_x=False):
    """``value`` (``f_pure(x, *consts)``, already computed) with the derivative of ``f_pure`` in ``consts``, and in
    ``x`` too where ``in_x`` (else ``x`` is held fixed: the envelope theorem at a minimiser).  One jvp, in ``x`` and
    the consts that carry a tangent only (a constant's infinite partial times a zero tangent would be NaN)."""

    @jax.custom_jvp
    def known(value, x, consts):
        del x, consts
        return value

    def known_jvp(primals, tangents):
        value, x, consts = primals
        _, dx, d_consts = tangents
        live = _live(consts, d_consts)
        moves_x = in_x and not isinstance(dx, SymbolicZero)
        if not live and not moves_x:
            return value, jnp.zeros_like(value)
        at = _on_live(lambda xx, full: f_pure(xx, *full), consts, live)
        live_vals, live_dots = [consts[i] for i in live], [d_consts[i] for i in live]
        if moves_x:
            return value, jax.jvp(at, (x, live_vals), (dx, live_dots))[1]
        # x held fixed is closed over, not given a zero tangent (0 x an infinite partial in x would be NaN)
        return value, jax.jvp(lambda vals: at(x, vals), (live_vals,), (live_dots,))[1]

    known.defjvp(known_jvp, symbolic_zeros=True)
    return known(jax.lax.stop_gradient(value), x if in_x else jax.lax.stop_gradient(x), list(consts))


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


def implicit_root(h, method, u_star, params):
    """``u_star`` carrying the implicit derivative of the root of ``h(., method, params)``.

    Implicit function theorem: ``du* / dparams = -(dh/dparams) / (dh/du)`` at the root.  A
    custom JVP, so the forward pass costs nothing; the rule evaluates ``h`` only when a
    derivative is asked for, linearised once (:func:`_partials`).
    """
    leaves, tree = jax.tree.flatten(params)

    @jax.custom_jvp
    def root(u, leaves):
        del leaves
        return u

    def root_jvp(primals, tangents):
        u, ls = primals
        slope, dh = _partials(lambda v, vals: h(v, method, jax.tree.unflatten(tree, vals)), u, ls, tangents[1])
        return u, _implicit_step(slope, dh)

    root.defjvp(root_jvp, symbolic_zeros=True)
    return root(jax.lax.stop_gradient(u_star), leaves)


def _implicit_step(slope, d_value):
    """``-d_value / slope``: the root's move; zero where the slope is 0 or not finite."""
    safe = jnp.isfinite(slope) & (slope != 0)
    return jnp.where(safe, -d_value / jnp.where(safe, slope, 1.0), 0.0)


def _partials(f, x, consts, d_consts):
    """``(df/dx, df/dconsts . d_consts)`` at ``(x, consts)`` for a ``custom_jvp`` rule declared with
    ``symbolic_zeros=True``: ONE linearisation of ``f`` (its primal traced once, then its linear map applied to the
    two directions), in ``x`` and the consts that carry a tangent only; for a few real parameter elements, one
    batched forward-mode Jacobian instead (:func:`_forward_partials`).  A const without one stays a constant: a zero
    tangent multiplied by its partial would be NaN where that partial is infinite (``sqrt`` at 0), the slope with it.
    ``f(x, consts)`` may return a pytree (each leaf's partials).  Known limit: a parameter that does carry a tangent
    and has an infinite partial at ``x`` makes the slope NaN, and the rules then give every parameter a zero
    derivative (a slope from a jvp in ``x`` alone would keep the others', for a second primal of ``f``); the
    accountants' parameters have finite partials there (PSG at ``q = 1`` included)."""
    live = _live(consts, d_consts)
    if not live:
        zeros = zeros_of(jax.eval_shape(lambda: f(x, list(consts))))
        return zeros, zeros
    at, vals = _on_live(f, consts, live), [consts[i] for i in live]
    if _few_real(vals):
        return _forward_partials(at, x, vals, [d_consts[i] for i in live])
    _, lin = jax.linearize(at, x, vals)
    in_x = lin(jnp.ones_like(x), [jnp.zeros_like(v) for v in vals])
    along = lin(jnp.zeros_like(x), [d_consts[i] for i in live])
    return in_x, along


#: at most this many live parameter elements take the forward-mode Jacobian (:func:`_forward_partials`)
FORWARD_PARTIALS_MAX = 8


def _few_real(vals):
    return sum(jnp.size(v) for v in vals) <= FORWARD_PARTIALS_MAX and all(
        jnp.issubdtype(jnp.result_type(v), jnp.floating) for v in vals
    )


def _forward_partials(at, x, vals, d_vals):
    """:func:`_partials` by forward mode, for a few real parameter elements: ``at``'s Jacobian in ``x`` (direction
    ones) and in each parameter element, one ``jvp`` batched over those ``1 + n`` directions, then contracted with
    ``d_vals``.

    Why: under reverse mode the linearisation's map applied to ``d_vals`` must be transposed, a second copy of
    ``at``'s derivative in the program; here the Jacobian is a value computed forward, and the only map left to
    transpose is the contraction.  A few directions cost about what the linearisation did at query time.
    """
    sizes = [int(jnp.size(v)) for v in vals]
    n = sum(sizes)
    eye = jnp.eye(n + 1, dtype=jnp.result_type(x))
    t_x = eye[:, :1].reshape((n + 1,) + (1,) * jnp.ndim(x)) * jnp.ones_like(x)
    t_vals, start = [], 1
    for v, m in zip(vals, sizes):
        t_vals.append(eye[:, start : start + m].astype(jnp.result_type(v)).reshape((n + 1, *jnp.shape(v))))
        start += m
    jac = jax.vmap(lambda tx, tv: jax.jvp(at, (x, vals), (tx, tv))[1])(t_x, t_vals)
    d = jnp.concatenate([jnp.ravel(jnp.asarray(dv, jnp.result_type(v))) for dv, v in zip(d_vals, vals)])

    def along(j):  # (j's leading axis: the directions; the parameters' are rows 1..n)
        return jnp.tensordot(d.astype(j.dtype), j[1:], axes=1)

    return jax.tree.map(lambda j: j[0], jac), jax.tree.map(along, jac)


def _live(consts, d_consts):
    """The indices of the consts that carry a tangent (not a ``SymbolicZero``; floating or complex)."""
    return [
        i
        for i, d in enumerate(d_consts)
        if not isinstance(d, SymbolicZero) and jnp.issubdtype(jnp.result_type(consts[i]), jnp.inexact)
    ]


def _on_live(f, consts, live):
    """``(x, live_values) -> f(x, consts with the live ones replaced)``: the others stay constants of the trace."""

    def at(x, vals):
        full = list(consts)
        for i, c in zip(live, vals):
            full[i] = c
        return f(x, full)

    return at
