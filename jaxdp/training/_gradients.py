"""Per-example gradients, clipped and summed microbatch by microbatch (memory: one microbatch of them)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxdp.training._aggregate import _check_hyper, clip_per_example, noisy_mean
from jaxdp.training._sampling import BatchSample

#: Default microbatch: this many per-example gradients are materialised at a time.
MICROBATCH_SIZE = 128


def per_example_grads(loss_fn, params, batch):
    """``jax.vmap(jax.grad(loss_fn), (None, 0))(params, batch)``: one gradient per example.

    ``loss_fn(params, example)`` takes one example (each leaf of ``batch`` without its leading axis) and
    returns a scalar loss.  Feed the result to :func:`~jaxdp.training.dp_aggregate`.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxdp.training import per_example_grads
      >>> loss = lambda w, ex: 0.5 * (jnp.dot(w, ex["x"]) - ex["y"]) ** 2
      >>> g = per_example_grads(loss, jnp.zeros(2), {"x": jnp.eye(2), "y": jnp.array([1.0, 2.0])})
      >>> g.tolist()
      [[-1.0, -0.0], [-0.0, -2.0]]
    """
    return jax.vmap(jax.grad(loss_fn), in_axes=(None, 0))(params, batch)


def clipped_grad_sum(loss_fn, params, data, sample: BatchSample, *, l2_norm_clip, microbatch_size=None):
    """Sum of the sampled examples' clipped gradients, computed ``microbatch_size`` examples at a time.

    Only the microbatches that hold sampled examples are computed (a ``lax.while_loop`` to
    ``ceil(size / microbatch_size)``), so a Poisson batch padded to the dataset's size costs what its
    real size costs; padded rows inside the last microbatch contribute exactly zero.

    Args:
      loss_fn: ``loss_fn(params, example) -> scalar``, one example (leaves without the leading axis).
      params: the parameters (any pytree).
      data: pytree of arrays with a leading example axis; ``sample.indices`` index into it (the whole
        dataset, or a batch already gathered and padded, with ``sample.indices = arange(B)``).
      sample: a :class:`~jaxdp.training.BatchSample`.
      l2_norm_clip: clipping norm ``C``.
      microbatch_size: per-example gradients held in memory at once (default 128, at most the sample's
        static length).

    Returns:
      ``(summed, stats)``: the sum (``params``' structure) and a dict with the mean ``loss`` over the
      sampled examples, the ``clipped_fraction`` and the batch ``size``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxdp.training import BatchSample, clipped_grad_sum
      >>> loss = lambda w, ex: jnp.dot(w, ex)
      >>> data = jnp.array([[3.0, 4.0], [0.3, 0.4], [100.0, 0.0]])
      >>> s = BatchSample(jnp.array([0, 1, 2]), jnp.array([True, True, False]), jnp.int32(2))
      >>> g, stats = clipped_grad_sum(loss, jnp.zeros(2), data, s, l2_norm_clip=1.0, microbatch_size=2)
      >>> [round(float(x), 3) for x in g], float(stats["clipped_fraction"])
      ([0.9, 1.2], 0.5)
    """
    length = sample.indices.shape[0]
    mb = min(MICROBATCH_SIZE if microbatch_size is None else int(microbatch_size), length)
    if mb < 1:
        raise ValueError(f"microbatch_size must be a whole number >= 1, got {microbatch_size!r}.")
    num_mb = math.ceil(length / mb)
    indices = jnp.pad(sample.indices, (0, num_mb * mb - length))
    size = jnp.asarray(sample.size, jnp.int32)
    value_and_grad = jax.vmap(jax.value_and_grad(loss_fn), in_axes=(None, 0))
    zero = jax.tree_util.tree_map(jnp.zeros_like, params)

    def body(state):
        i, total, loss_sum, clipped = state
        start = i * mb
        idx = jax.lax.dynamic_slice(indices, (start,), (mb,))
        mask = start + jnp.arange(mb) < size
        rows = jax.tree_util.tree_map(lambda a: a[idx], data)
        losses, grads = value_and_grad(params, rows)
        grads, norms = clip_per_example(grads, l2_norm_clip=l2_norm_clip, mask=mask)
        total = jax.tree_util.tree_map(lambda t, g: t + jnp.sum(g, axis=0), total, grads)
        loss_sum = loss_sum + jnp.sum(jnp.where(mask, losses, 0.0)).astype(jnp.float32)
        clipped = clipped + jnp.sum(mask & (norms > l2_norm_clip))
        return i + 1, total, loss_sum, clipped

    steps = (size + mb - 1) // mb
    init = (jnp.int32(0), zero, jnp.float32(0.0), jnp.int32(0))
    _, total, loss_sum, clipped = jax.lax.while_loop(lambda s: s[0] < steps, body, init)
    denom = jnp.maximum(size, 1).astype(jnp.float32)
    stats = {"loss": loss_sum / denom, "clipped_fraction": clipped / denom, "size": size}
    return total, stats


def private_grad(
    loss_fn,
    params,
    data,
    sample: BatchSample,
    key,
    *,
    l2_norm_clip,
    noise_multiplier,
    expected_batch_size,
    microbatch_size=None,
):
    """One DP-SGD gradient: clipped per-example gradients summed (:func:`clipped_grad_sum`), Gaussian noise
    of standard deviation ``noise_multiplier * l2_norm_clip`` added, divided by ``expected_batch_size``.

    Returns ``(gradient, stats)``; feed the gradient to any optax optimizer.  Jits with x64 off or on.

    Formal Guarantees:
      For a Poisson sample of rate ``q`` (:func:`~jaxdp.training.poisson_sample`) the released gradient is
      ``jaxdp.PoissonSubsampledGaussian(noise_multiplier, q)`` (add-or-remove adjacency) applied to the
      dataset; the step's privacy cost is what :class:`~jaxdp.training.PrivacyTracker` records for it.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxdp.training import poisson_sample, private_grad
      >>> data = jax.random.normal(jax.random.key(1), (1000, 3))
      >>> loss = lambda w, ex: jnp.sum((w - ex) ** 2)
      >>> s = poisson_sample(jax.random.key(2), num_examples=1000, sampling_prob=0.05)
      >>> g, stats = private_grad(loss, jnp.zeros(3), data, s, jax.random.key(3), l2_norm_clip=1.0,
      ...                         noise_multiplier=1.0, expected_batch_size=50)
      >>> g.shape, g.dtype
      ((3,), dtype('float32'))
    """
    _check_hyper(l2_norm_clip, noise_multiplier, expected_batch_size)
    summed, stats = clipped_grad_sum(
        loss_fn, params, data, sample, l2_norm_clip=l2_norm_clip, microbatch_size=microbatch_size
    )
    grad = noisy_mean(
        summed,
        key,
        l2_norm_clip=l2_norm_clip,
        noise_multiplier=noise_multiplier,
        expected_batch_size=expected_batch_size,
    )
    return grad, stats
