"""Immutable dataclasses registered as JAX pytrees.

``data`` fields are pytree children (they may be traced: ``jax.vmap`` over the
noise multiplier, ``jax.grad`` with respect to the sampling probability);
``static`` fields are hashable metadata (e.g. the adjacency relation).
Unflattening bypasses ``__init__`` so that JAX can rebuild a mechanism from
tracers, gradients (possibly negative) or placeholders without tripping the
user-facing argument checks done in ``__post_init__``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.extend
import jax.numpy as jnp

__all__ = ["pytree_dataclass", "traced_once", "zeros_of"]


def zeros_of(shapes):
    """Zeros shaped as a pytree of ``jax.ShapeDtypeStruct`` (``jax.eval_shape``'s result): the finite stand-in of
    a branch that is not taken (a skipped ``lax.cond`` branch, a loop's first state), traced without running the
    function whose shapes they are."""
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def traced_once(fn, *example_args):
    """``(call, shapes)``: ``fn`` traced to a jaxpr once, at the structure and shapes of ``example_args``.

    ``call(*args)`` (arguments of that structure and those shapes) evaluates the jaxpr, which binds its primitives
    again, a fraction of the time that tracing ``fn``'s Python takes; ``shapes`` is ``jax.eval_shape(fn,
    *example_args)``.  For a caller that needs a function's output shapes before it calls it (a loop's first state,
    the stand-in of a branch not taken): ``jax.eval_shape`` followed by the call would trace ``fn`` twice.  The
    program is the same as ``fn``'s own (what ``fn`` closes over is a constant of the jaxpr, as of ``fn``).
    """
    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*example_args)
    out_tree = jax.tree.structure(shapes)
    run = jax.extend.core.jaxpr_as_fun(closed)

    def call(*args):
        return jax.tree.unflatten(out_tree, run(*jax.tree.leaves(args)))

    return call, shapes


def pytree_dataclass(*, data: tuple[str, ...], static: tuple[str, ...] = ()):
    """Class decorator: frozen dataclass + pytree registration."""

    def wrap(cls):
        cls = dataclasses.dataclass(frozen=True, eq=False)(cls)

        def flatten_with_keys(obj):
            children = [(jax.tree_util.GetAttrKey(f), getattr(obj, f)) for f in data]
            return children, tuple(getattr(obj, f) for f in static)

        def flatten(obj):
            return [getattr(obj, f) for f in data], tuple(getattr(obj, f) for f in static)

        def unflatten(aux, children):
            obj = object.__new__(cls)
            for f, v in zip(data, children):
                object.__setattr__(obj, f, v)
            for f, v in zip(static, aux):
                object.__setattr__(obj, f, v)
            return obj

        jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
        return cls

    return wrap
