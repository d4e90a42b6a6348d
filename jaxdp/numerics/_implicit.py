"""Derivatives of roots and values found by an iteration, without differentiating the iteration: the implicit
function theorem as ``custom_jvp`` rules, traced only where a derivative is asked for."""

from __future__ import annotations

import jax
import jax.extend
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from jaxdp.numerics._pytree import zeros_of

__all__ = ["implicit_root", "root_and_value_found_elsewhere", "root_found_elsewhere", "value_found_elsewhere"]


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
