"""flax.nnx models as pure per-example losses (what :func:`~jaxdp.training.private_grad` differentiates)."""

from __future__ import annotations


def nnx_loss(model, loss_fn):
    """Splits a ``flax.nnx`` model into its parameters and a pure per-example loss.

    Args:
      model: an ``nnx.Module`` (without batch statistics: BatchNorm mixes examples and breaks per-example
        clipping; use LayerNorm or GroupNorm).
      loss_fn: ``loss_fn(model, example) -> scalar`` for one example (leaves without a batch axis).

    Returns:
      ``(params, pure_loss, merge)``: the ``nnx.Param`` state, ``pure_loss(params, example)`` and
      ``merge(params) -> model`` (a model carrying the given parameters, e.g. after training).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from flax import nnx
      >>> from jaxdp.training import nnx_loss, per_example_grads
      >>> model = nnx.Linear(3, 1, rngs=nnx.Rngs(0))
      >>> loss = lambda m, ex: jnp.sum((m(ex["x"]) - ex["y"]) ** 2)
      >>> params, pure, merge = nnx_loss(model, loss)
      >>> g = per_example_grads(pure, params, {"x": jnp.ones((5, 3)), "y": jnp.zeros((5, 1))})
      >>> g["kernel"][...].shape
      (5, 3, 1)
    """
    from flax import nnx

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def merge(p):
        return nnx.merge(graphdef, p, rest)

    def pure_loss(p, example):
        return loss_fn(merge(p), example)

    return params, pure_loss, merge
