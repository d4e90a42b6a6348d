"""DP-SGD aggregation: per-example clipping, Gaussian noise, normalisation by the expected batch size."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxdp.numerics import validate as _validate

#: Clipped gradients are scaled to ``(1 - CLIP_MARGIN) * C`` so that float32 rounding of the norm (relative
#: error ~ log2(#parameters) * 6e-8) can never leave an example above ``C``, the sensitivity the accountant uses.
CLIP_MARGIN = 1e-5


def _check_hyper(l2_norm_clip, noise_multiplier, expected_batch_size):
    _validate.positive("l2_norm_clip", l2_norm_clip)
    if not callable(noise_multiplier):
        _validate.nonnegative("noise_multiplier", noise_multiplier)
    _validate.positive("expected_batch_size", expected_batch_size)


def global_norms(per_example):
    """L2 norm of each example's gradient over the whole pytree (leading axis: examples)."""
    leaves = jax.tree_util.tree_leaves(per_example)
    sq = sum(jnp.sum(jnp.reshape(x, (x.shape[0], -1)).astype(jnp.float32) ** 2, axis=1) for x in leaves)
    return jnp.sqrt(sq)


def clip_per_example(per_example, *, l2_norm_clip, mask=None):
    """Clips each example's gradient to L2 norm at most ``l2_norm_clip``; masked-out rows become exactly zero.

    Args:
      per_example: pytree of arrays with a leading example axis ``B``.
      l2_norm_clip: the clipping norm ``C > 0`` (the sensitivity of the sum).
      mask: optional boolean ``(B,)``; False rows (padding) contribute exactly zero, even if they hold NaN.

    Returns:
      ``(clipped, norms)``: the clipped pytree (same shapes) and the norms before clipping, ``(B,)``.

    Formal Guarantees:
      Every row of ``clipped`` has global L2 norm at most ``l2_norm_clip``: rows above it are scaled to
      ``(1 - 1e-5) * l2_norm_clip`` (a margin for the float32 rounding of the norm).

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxdp.training import clip_per_example
      >>> g = {"w": jnp.array([[3.0, 4.0], [0.3, 0.4]])}
      >>> clipped, norms = clip_per_example(g, l2_norm_clip=1.0, mask=jnp.array([True, True]))
      >>> [round(float(n), 4) for n in norms], [round(float(x), 4) for x in clipped["w"][0]]
      ([5.0, 0.5], [0.6, 0.8])
    """
    norms = global_norms(per_example)
    c = jnp.asarray(l2_norm_clip, jnp.float32)
    safe = jnp.where(norms > c, norms, 1.0)  # double where: no division by zero, no NaN gradient
    scale = jnp.where(norms > c, c * (1.0 - CLIP_MARGIN) / safe, 1.0)
    keep = jnp.isfinite(norms) if mask is None else (mask & jnp.isfinite(norms))
    # a non-finite example (overflowing loss) is dropped rather than allowed to poison the sum; dropping one
    # example's contribution is a post-processing of a clipped sum with that row replaced by zero (norm <= C)

    def one(x):
        s = jnp.reshape(scale, (-1,) + (1,) * (x.ndim - 1)).astype(x.dtype)
        k = jnp.reshape(keep, (-1,) + (1,) * (x.ndim - 1))
        return jnp.where(k, x * s, jnp.zeros_like(x))

    return jax.tree_util.tree_map(one, per_example), norms


def add_noise(summed, key, *, stddev):
    """``summed + N(0, stddev^2 I)`` leaf by leaf (independent keys), in each leaf's dtype."""
    leaves, treedef = jax.tree_util.tree_flatten(summed)
    keys = jax.random.split(key, len(leaves))
    noisy = [x + jnp.asarray(stddev, x.dtype) * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)]
    return jax.tree_util.tree_unflatten(treedef, noisy)


def noisy_mean(summed, key, *, l2_norm_clip, noise_multiplier, expected_batch_size):
    """``(sum of clipped gradients + N(0, (sigma C)^2 I)) / expected_batch_size``."""
    noisy = add_noise(summed, key, stddev=jnp.asarray(noise_multiplier, jnp.float32) * l2_norm_clip)
    return jax.tree_util.tree_map(lambda x: x / jnp.asarray(expected_batch_size, x.dtype), noisy)


class DpAggregateState(NamedTuple):
    """State of :func:`dp_aggregate`: the PRNG key of the next step's noise and the number of steps taken."""

    key: Any
    count: Any


def dp_aggregate(*, l2_norm_clip, noise_multiplier, expected_batch_size, key) -> optax.GradientTransformationExtraArgs:
    """DP-SGD's private aggregation as an optax transformation: clip, sum, add noise, divide.

    ``update`` takes *per-example* gradients (each leaf with a leading example axis ``B``) and an optional
    ``mask=`` keyword (``(B,)`` booleans; padded rows contribute exactly zero), clips each example to
    ``l2_norm_clip``, sums, adds Gaussian noise of standard deviation ``noise_multiplier * l2_norm_clip`` and
    divides by ``expected_batch_size`` (with Poisson sampling, the expected batch size ``q N``: dividing by
    the realised size would leak it).  Chain it before any optimizer; ``optax.chain`` forwards ``mask=``.

    Args:
      l2_norm_clip: clipping norm ``C > 0``.
      noise_multiplier: ``sigma >= 0``, or an optax-style schedule ``step -> sigma`` (the step count starts
        at 0).  Account for the same values with :class:`~jaxdp.training.PrivacyTracker`.
      expected_batch_size: the normaliser, ``q * N`` for Poisson sampling (the batch size for fixed batches).
      key: the PRNG key of the noise (split once per step; explicit, never global).

    Returns:
      An ``optax.GradientTransformationExtraArgs``.

    Raises:
      ValueError: for a non-positive ``l2_norm_clip`` or ``expected_batch_size``, or a negative
        ``noise_multiplier``.

    Formal Guarantees:
      The output is the Gaussian mechanism with noise multiplier ``sigma`` applied to a sum whose
      add/remove-one sensitivity is ``l2_norm_clip``; with Poisson sampling of rate ``q`` each step is
      ``jaxdp.PoissonSubsampledGaussian(sigma, q)``.

    Example:
      >>> import jax, jax.numpy as jnp, optax
      >>> from jaxdp.training import dp_aggregate
      >>> tx = optax.chain(dp_aggregate(l2_norm_clip=1.0, noise_multiplier=0.0, expected_batch_size=2,
      ...                               key=jax.random.key(0)), optax.sgd(0.1))
      >>> params = {"w": jnp.zeros(2)}
      >>> per_example = {"w": jnp.array([[3.0, 4.0], [1.0, 0.0]])}     # two examples
      >>> updates, state = tx.update(per_example, tx.init(params), params, mask=jnp.array([True, False]))
      >>> [round(float(u), 4) for u in updates["w"]]                     # -0.1 * [0.6, 0.8] / 2
      [-0.03, -0.04]
    """
    _check_hyper(l2_norm_clip, noise_multiplier, expected_batch_size)
    sigma_of = noise_multiplier if callable(noise_multiplier) else (lambda _: noise_multiplier)

    def init(params):
        del params
        return DpAggregateState(key=key, count=jnp.zeros((), jnp.int32))

    def update(updates, state, params=None, *, mask=None, **extra):
        del params, extra
        clipped, _ = clip_per_example(updates, l2_norm_clip=l2_norm_clip, mask=mask)
        summed = jax.tree_util.tree_map(lambda x: jnp.sum(x, axis=0), clipped)
        key, sub = jax.random.split(state.key)
        out = noisy_mean(
            summed,
            sub,
            l2_norm_clip=l2_norm_clip,
            noise_multiplier=sigma_of(state.count),
            expected_batch_size=expected_batch_size,
        )
        return out, DpAggregateState(key=key, count=state.count + 1)

    return optax.GradientTransformationExtraArgs(init, update)
