"""Sweeps of many configurations spread over all local devices (``shard_map``), batched by ``vmap``."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

__all__ = ["sweep"]


def sweep(fn, *args, batch_size: int = 256):
    """``fn`` applied to every configuration of ``args``, spread over all local devices.

    ``args`` are arrays broadcast together (any shape); ``fn`` takes one scalar of each and returns a
    pytree of arrays.  The configurations are split evenly over ``jax.local_devices()`` (a 1-D
    ``shard_map``: GPUs, TPU cores, or CPU devices made by
    ``XLA_FLAGS=--xla_force_host_platform_device_count=N``), and each device maps ``jax.vmap(fn)`` over
    batches of ``batch_size`` (memory stays bounded).  One compiled program per (``fn``, shapes); the
    results do not depend on the number of devices.

    Args:
      fn: ``(*scalars) -> pytree`` (pass the same function object to reuse its compilation).
      *args: arrays (or scalars) broadcast to a common shape ``S``.
      batch_size: configurations per vectorised batch.

    Returns:
      ``fn``'s pytree with every leaf of shape ``S + leaf_shape``.

    Example:
      >>> import jax.numpy as jnp, jaxdp
      >>> sigmas = jnp.linspace(0.8, 2.0, 7)
      >>> eps = jaxdp.sweep(lambda s: jaxdp.epsilon_for_delta(
      ...     jaxdp.PoissonSubsampledGaussian(s, 0.01), delta=1e-5, num_steps=1000, method="rdp"), sigmas)
      >>> eps.shape, bool(jnp.all(jnp.diff(eps) < 0))
      ((7,), True)
    """
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}.")
    if not args:
        raise ValueError("sweep needs at least one array of configurations.")
    arrays = jnp.broadcast_arrays(*(jnp.asarray(a) for a in args))
    shape = arrays[0].shape
    n = int(np.prod(shape)) if shape else 1
    flat = tuple(a.reshape(-1) for a in arrays)
    return _sweep(fn, flat, n, shape, int(batch_size))


def _sweep(fn, flat, n, shape, batch_size):
    devices = jax.local_devices()
    n_dev = len(devices)
    per_device = -(-n // n_dev)
    batch = min(batch_size, per_device)
    blocks = -(-per_device // batch)
    total = n_dev * blocks * batch
    padded = tuple(
        jnp.concatenate([a, jnp.broadcast_to(a[-1:], (total - n,))]).reshape(n_dev * blocks, batch) for a in flat
    )
    out = _program(fn, n_dev)(*padded)
    return jax.tree.map(lambda o: o.reshape(total, *o.shape[2:])[:n].reshape(*shape, *o.shape[2:]), out)


@functools.lru_cache(maxsize=64)
def _program(fn, n_dev):
    mesh = Mesh(np.array(jax.local_devices()), ("configs",))
    spec = PartitionSpec("configs")

    def local(*xs):
        return jax.lax.map(lambda b: jax.vmap(fn)(*b), xs)

    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False))
