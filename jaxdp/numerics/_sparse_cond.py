"""``lax.cond`` whose expensive branch, under ``vmap``, runs only on the batch elements that take it."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdp.numerics._boundary import keep_x64_mode

#: under ``vmap``, the true branch runs on this many gathered batch elements at a time
SPARSE_CHUNK = 32


def sparse_cond(pred, true_fn, false_fn, operands, *, chunk: int = SPARSE_CHUNK, true_unless_batched: bool = False):
    """``jax.lax.cond(pred, true_fn, false_fn, operands)``, except under ``jax.vmap`` with a batched ``pred``.

    There ``lax.cond`` becomes a ``select``: both branches run on every element.  Here ``false_fn`` (the
    cheap one) runs on the whole batch and ``true_fn`` only on the elements where ``pred`` holds, gathered
    ``chunk`` at a time in a ``while_loop`` (not at all where none holds).  For a branch that few elements
    take (three-step compositions in a sweep of step counts) this keeps its cost out of everyone's.

    ``true_fn`` and ``false_fn`` take ``operands`` (a pytree; nothing batched may be closed over) and return
    pytrees of one structure.  Differentiable, forward and reverse: the derivative is that of ``lax.cond``
    (under ``vmap`` of a derivative both branches then run, as with ``lax.cond``).  Not supported: reverse mode
    through a ``vmap`` with a batched ``pred`` (``grad`` of a sum over ``vmap``; ``vmap`` of ``grad`` works).
    JAX then fails with "Transpose rule for 'stop_gradient' not implemented" wherever a branch uses
    ``stop_gradient``; a ``custom_jvp`` rule holding a ``lax.cond`` fails the same way without jaxdp.

    ``true_unless_batched``: outside ``vmap`` (or with an unbatched ``pred``) run ``true_fn`` with no ``cond``
    at all, and differentiate ``true_fn``.  This is for a caller whose ``pred`` always holds there, such as the
    body of a ``while_loop`` that masks the batch elements that are done.  (One ``cond`` fewer in a loop body.)

    Example:
      >>> import jax, jax.numpy as jnp
      >>> f = lambda x: sparse_cond(x > 2.0, lambda v: v * v, lambda v: -v, x)
      >>> jax.vmap(f)(jnp.arange(5.0)).tolist()
      [-0.0, -1.0, -2.0, 9.0, 16.0]
    """

    def plain(p, ops):
        return true_fn(ops) if true_unless_batched else jax.lax.cond(p, true_fn, false_fn, ops)

    # (the rules run in this call's x64 mode: under a user's ``jit(vmap)`` with x64 off, JAX 0.11 traces the
    # batching rule outside ``float64_entry``'s scope, "lax.div requires arguments to have the same dtypes")

    @jax.custom_batching.custom_vmap
    def primal(p, ops):
        return plain(p, ops)

    @primal.def_vmap
    @keep_x64_mode
    def _rule(axis_size, in_batched, p, ops):
        p_batched, ops_batched = in_batched
        axes = jax.tree.map(lambda b: 0 if b else None, ops_batched)
        on_true = jax.vmap(true_fn, in_axes=(axes,))
        on_false = jax.vmap(false_fn, in_axes=(axes,))
        if not p_batched:  # one predicate for the whole batch: a real cond
            out = on_true(ops) if true_unless_batched else jax.lax.cond(p, on_true, on_false, ops)
            return out, jax.tree.map(lambda _: True, out)
        out = on_false(ops)
        k = min(chunk, axis_size)
        order = jnp.argsort(jnp.logical_not(p), stable=True)  # the elements that take the branch first
        count = jnp.sum(p.astype(jnp.int32))

        def body(state):
            i, acc = state
            start = jnp.minimum(i * k, axis_size - k)
            idx = jax.lax.dynamic_slice_in_dim(order, start, k)
            valid = (start + jnp.arange(k)) < count  # (the first always is: start <= i k < count)
            # the chunk's slots past the last element taking the branch repeat its first element: padding with
            # the elements that do not take it would run their iterations to the end (a three-step Newton on a
            # 500,000-step composition, say), and the chunk's loops with them
            sub = jax.tree.map(lambda x, b: x[jnp.where(valid, idx, idx[0])] if b else x, ops, ops_batched)
            vals = on_true(sub)

            def put(a, v):
                keep = valid.reshape((k,) + (1,) * (v.ndim - 1))
                return a.at[idx].set(jnp.where(keep, v, a[idx]))

            return i + 1, jax.tree.map(put, acc, vals)

        _, out = jax.lax.while_loop(lambda s: s[0] * k < count, body, (jnp.asarray(0, jnp.int32), out))
        return out, jax.tree.map(lambda _: True, out)

    @jax.custom_jvp
    def f(p, ops):
        return primal(p, ops)

    @f.defjvp
    @keep_x64_mode
    def _jvp(primals, tangents):
        p, ops = primals
        _, d_ops = tangents
        return jax.jvp(lambda o: plain(p, o), (ops,), (d_ops,))

    return f(jnp.asarray(pred, bool), operands)
