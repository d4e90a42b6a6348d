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
import jax.numpy as jnp

__all__ = ["pytree_dataclass", "zeros_of"]


def zeros_of(shapes):
    """Zeros shaped as a pytree of ``jax.ShapeDtypeStruct`` (``jax.eval_shape``'s result): the finite stand-in of
    a branch that is not taken (a skipped ``lax.cond`` branch, a loop's first state), traced without running the
    function whose shapes they are."""
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


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
