"""Batch sampling for DP-SGD: Poisson (what the accountants assume) and fixed-size batches, at static shapes."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxdp.numerics import pytree_dataclass
from jaxdp.numerics import validate as _validate


@pytree_dataclass(data=("indices", "mask", "size"), static=("sampling",))
class BatchSample:
    """A batch at a static shape: ``indices[:size]`` are the sampled examples, the rest is padding.

    ``mask[i]`` is ``i < size``; padded rows (index 0) must contribute nothing (``clip_per_example`` zeroes
    them).  ``sampling`` says how the batch was drawn ("poisson" or "fixed"), so an accountant is never
    handed a fixed batch as if it were Poisson.
    """

    indices: Any
    mask: Any
    size: Any
    sampling: str = "poisson"


def poisson_sample(key, *, num_examples: int, sampling_prob) -> BatchSample:
    """Poisson sampling: each of the ``num_examples`` examples joins the batch independently with
    probability ``sampling_prob``.  The batch size is random; the result has the static length
    ``num_examples`` (no truncation, so nothing is lost from the accounted mechanism), the sampled
    indices first, in increasing order.

    Args:
      key: PRNG key.
      num_examples: dataset size ``N`` (static).
      sampling_prob: ``q`` in ``(0, 1]`` (may be traced, e.g. a schedule).

    Returns:
      A :class:`BatchSample`.

    Formal Guarantees:
      Membership is i.i.d. Bernoulli(q), the sampling that ``jaxdp.PoissonSubsampledGaussian`` accounts.

    Example:
      >>> import jax
      >>> from jaxdp.training import poisson_sample
      >>> s = poisson_sample(jax.random.key(0), num_examples=1000, sampling_prob=0.1)
      >>> s.indices.shape, 50 < int(s.size) < 150, bool(s.mask.sum() == s.size)
      ((1000,), True, True)
    """
    if not isinstance(num_examples, int) or num_examples < 1:
        raise ValueError(f"num_examples must be a whole number >= 1, got {num_examples!r}.")
    _validate.probability("sampling_prob", sampling_prob)
    member = jax.random.uniform(key, (num_examples,)) < sampling_prob
    size = jnp.sum(member).astype(jnp.int32)
    (indices,) = jnp.nonzero(member, size=num_examples, fill_value=0)
    mask = jnp.arange(num_examples) < size
    return BatchSample(indices.astype(jnp.int32), mask, size, "poisson")


def fixed_batch_sample(key, *, num_examples: int, batch_size: int) -> BatchSample:
    """A uniformly random subset of exactly ``batch_size`` examples (sampling without replacement).

    Not Poisson sampling: account for it with the fixed-batch mechanism
    (:meth:`jaxdp.MixtureOfGaussians.fixed_batch_group`, or ``PrivacyTracker.record(...,
    sampling="fixed", dataset_size=, batch_size=)``), not with ``PoissonSubsampledGaussian`` at ``B / n``,
    which under-reports it.

    Example:
      >>> import jax
      >>> from jaxdp.training import fixed_batch_sample
      >>> s = fixed_batch_sample(jax.random.key(0), num_examples=100, batch_size=10)
      >>> s.indices.shape, int(s.size), len(set(s.indices.tolist()))
      ((10,), 10, 10)
    """
    if not isinstance(num_examples, int) or num_examples < 1:
        raise ValueError(f"num_examples must be a whole number >= 1, got {num_examples!r}.")
    if not isinstance(batch_size, int) or not 1 <= batch_size <= num_examples:
        raise ValueError(f"batch_size must be a whole number in [1, num_examples={num_examples}], got {batch_size!r}.")
    indices = jax.random.choice(key, num_examples, (batch_size,), replace=False)
    return BatchSample(indices.astype(jnp.int32), jnp.ones(batch_size, bool), jnp.int32(batch_size), "fixed")
