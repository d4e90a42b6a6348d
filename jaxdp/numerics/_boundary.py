"""The float64 boundary of the public entry points.

JAX users run with ``jax_enable_x64`` off.  Turning 64-bit mode on for the
duration of a call (``jax.enable_x64(True)``) is enough when the call runs
eagerly, and when the user's own transformation (``jit``, ``vmap``) is traced
with x64 on.  It is not enough inside a user's ``jax.jit`` or ``jax.grad``
traced with x64 off: the float64 operations recorded inside the call are
*transposed* (reverse-mode) and *lowered* (``jit``) later, after the call has
returned and x64 is off again, and some of JAX's transpose and lowering rules
then create float32 constants next to float64 operands (a TypeError).

:func:`float64_entry` closes that gap.  When x64 is off and an input is traced,
the call becomes one ``jax.custom_jvp`` function of the array inputs:

* its primal computes in float64 inside the x64 scope and hands back the
  outputs in the user's (canonical) dtypes, rounded in the direction that keeps
  a bound a bound (an upper bound rounds up);
* a ``jax.custom_batching.custom_vmap`` rule batches it inside the x64 scope
  too, even when the user's ``vmap`` meets it in an already-traced program;
* its derivative is computed inside the x64 scope too (a Jacobian by forward or
  reverse mode, itself through the same boundary, so any order works), and the
  tangent the user's transformation sees is the linear map ``J @ dx`` in the
  user's dtype, which every transpose rule handles.

Lowering is the remaining hazard: the float64 operations are lowered by the
user's ``jit`` with x64 off.  The package avoids the few primitives whose
lowering depends on the x64 flag (``argmax``/``argmin``: see
:func:`jaxdp.numerics.argmax`).  From JAX 0.12, indexing with a traced index
(``x.at[i]``, ``jnp.take``, ``jnp.roll``) and ``lax.custom_root`` are expanded
at lowering time as well, outside the scope: traced index arrays are int32
(an int64 index meets the int32 constants of that expansion), and roots carry
their derivative through a ``custom_jvp`` (``numerics._solvers``).
``tests/test_user_mode.py`` runs every public entry point under every
transformation in a subprocess with x64 off, on the oldest and the newest JAX
CI runs.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.numerics._logspace import _enable_x64

__all__ = ["DOWN", "NEAREST", "UP", "float64_entry", "keep_x64_mode", "x64_enabled"]

UP, DOWN, NEAREST = 1, -1, 0

# the dtype a float64-mode value has in the user's x64-off world
_NARROW = {
    np.dtype(np.float64): np.dtype(np.float32),
    np.dtype(np.complex128): np.dtype(np.complex64),
    np.dtype(np.int64): np.dtype(np.int32),
    np.dtype(np.uint64): np.dtype(np.uint32),
}
_FORWARD_MODE_MAX_INPUTS = 8  # Jacobians with at most this many input elements use forward mode


def keep_x64_mode(fn):
    """``fn``, run in the x64 mode that is current where ``keep_x64_mode`` is called.

    For the functions handed to JAX to be traced later: JAX 0.11 traces a ``custom_vmap`` rule (of
    :func:`~jaxdp.numerics.sparse_cond`) after the caller's ``enable_x64`` scope has closed (under a user's
    ``jit(vmap)`` with x64 off: "lax.div requires arguments to have the same dtypes, got float64, float32");
    JAX 0.10 traces it inside.
    """
    on = x64_enabled()

    @functools.wraps(fn)
    def inner(*args, **kwargs):
        with _enable_x64(on):
            return fn(*args, **kwargs)

    return inner


def x64_enabled() -> bool:
    """Whether JAX's 64-bit mode is on here (the global flag or an enclosing ``enable_x64``)."""
    return jax.dtypes.canonicalize_dtype(np.float64) == np.float64


def _is_array(leaf) -> bool:
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic))


def _traced(leaves) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in leaves)


def float64_entry(fn=None, *, rounding=UP):
    """Decorator of a public entry point: float64 inside, whatever the user's x64 setting.

    Args:
      fn: the function (its array inputs may be traced; it may raise ``ValueError``
        for bad static or concrete inputs).
      rounding: how a float64 output is rounded to float32 when the call is traced
        with x64 off: ``UP`` (an upper bound stays one), ``DOWN`` or ``NEAREST`` for
        every output, or a function ``output -> pytree of those`` with the output's
        structure.

    With x64 on, or with no traced input, ``fn`` simply runs with x64 enabled and
    returns float64 arrays.  Otherwise see the module docstring.
    """
    if fn is None:
        return functools.partial(float64_entry, rounding=rounding)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        leaves, treedef = jax.tree.flatten((args, kwargs))
        if x64_enabled() or not _traced(leaves):
            with _enable_x64(True):
                return fn(*args, **kwargs)
        dynamic = [_is_array(leaf) for leaf in leaves]

        def call(*arrays):
            it = iter(arrays)
            full = [next(it) if d else leaf for leaf, d in zip(leaves, dynamic)]
            a, k = jax.tree.unflatten(treedef, full)
            return fn(*a, **k)

        directions = rounding if callable(rounding) else (lambda out: jax.tree.map(lambda _: rounding, out))
        return _boundary(call, tuple(jnp.asarray(x) for x, d in zip(leaves, dynamic) if d), directions)

    return wrapper


def _widen(x):
    if jnp.issubdtype(x.dtype, jnp.floating):
        return jnp.asarray(x, jnp.float64)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        return jnp.asarray(x, jnp.complex128)
    return x


def _narrow(x, direction):
    """``x`` in the x64-off dtype, rounded towards ``direction`` (call inside the x64 scope)."""
    x = jnp.asarray(x)
    target = _NARROW.get(x.dtype, x.dtype)
    if target == x.dtype:
        return x
    y = x.astype(target)
    if direction and jnp.issubdtype(x.dtype, jnp.floating):
        toward = jnp.asarray(math.inf if direction > 0 else -math.inf, target)
        wrong = (y.astype(x.dtype) < x) if direction > 0 else (y.astype(x.dtype) > x)
        y = jnp.where(wrong, jnp.nextafter(y, toward), y)
    return y


def _run64(f, xs, directions):
    with _enable_x64(True):
        out = f(*(_widen(x) for x in xs))
        return jax.tree.map(_narrow, out, directions(out))


def _is_float(x) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.inexact)


def _boundary(f, xs, directions):
    """``f(*xs)`` (``f`` float64 inside) as a ``custom_jvp`` function of the arrays ``xs``."""
    diff = tuple(i for i, x in enumerate(xs) if _is_float(x))

    # A batching rule of our own: a user's vmap applied to an already-traced program (vmap of
    # their jit) batches the float64 operations inside the x64 scope, like the direct vmap.
    @jax.custom_batching.custom_vmap
    def primal(*xs):
        return _run64(f, xs, directions)

    @primal.def_vmap
    def _batched(axis_size, in_batched, *xs):
        axes = [0 if b else None for b in in_batched]
        out = jax.vmap(lambda *ys: _run64(f, ys, directions), in_axes=axes, axis_size=axis_size)(*xs)
        return out, jax.tree.map(lambda _: True, out)

    if not diff:
        return primal(*xs)

    @jax.custom_jvp
    def g(*xs):
        return primal(*xs)

    @g.defjvp
    def g_jvp(primals, tangents):
        out, jac = _boundary(
            functools.partial(_value_and_jacobian, f, diff),
            primals,
            lambda o: (directions(o[0]), jax.tree.map(lambda _: NEAREST, o[1])),
        )
        leaves, treedef = jax.tree.flatten(out)
        jac = iter(jac)
        t_out = []
        for leaf in leaves:
            if not _is_float(leaf):
                t_out.append(np.zeros(np.shape(leaf), jax.dtypes.float0))
                continue
            rows = next(jac)
            t = jnp.zeros(np.shape(leaf), leaf.dtype)
            for k, i in enumerate(diff):
                dx = jnp.asarray(tangents[i], leaf.dtype)
                t = t + jnp.tensordot(rows[k], dx, axes=dx.ndim)
            t_out.append(t)
        return out, jax.tree.unflatten(treedef, t_out)

    return g(*xs)


def _value_and_jacobian(f, diff, *xs):
    """``(f(*xs), J)``: ``J[o][k]`` is d(float output leaf o) / d(xs[diff[k]]) (float64 scope)."""

    def part(*d):
        full = list(xs)
        for k, i in enumerate(diff):
            full[i] = d[k]
        out = f(*full)
        return [leaf for leaf in jax.tree.leaves(out) if _is_float(leaf)], out

    d0 = [xs[i] for i in diff]
    size = sum(int(np.size(x)) for x in d0)
    jacobian = jax.jacfwd if size <= _FORWARD_MODE_MAX_INPUTS else jax.jacrev
    jac, out = jacobian(part, argnums=tuple(range(len(diff))), has_aux=True)(*d0)
    return out, jac
