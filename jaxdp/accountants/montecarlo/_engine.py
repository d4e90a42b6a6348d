"""The sampling engine: chunks of samples of the composed privacy loss, reduced to sums.

``delta(eps) = E_P[(1 - e^{eps - L})_+]`` is estimated from ``num_samples`` independent draws of the
``T``-step output, in chunks of ``CHUNK`` samples (and blocks of at most ``BLOCK`` steps), so memory
is ``O(CHUNK x BLOCK)`` whatever the number of samples or steps.  Chunk ``c`` draws its randomness
from ``fold_in(key, c)`` alone: the estimate does not depend on how chunks are spread over devices
(``shard_map`` over all local devices) and is summed in chunk order.

Estimators (``log w`` is the log importance weight, ``dP/dG`` for the proposal ``G``):

* ``"simple"``: ``G = P`` (Def. 11 of Wang et al. 2023).
* ``"tilted"``: every step drawn from its exponential tilt ``P_theta`` (in the output ``x``), each
  step's ``theta`` such that its tilted mean loss is the saddle-point tilt's ``K_i'(t*)``,
  ``sum_i K_i'(t*) = eps + 1/t* + 1/(1 + t*)``; ``log w = sum_i (log M_i(theta_i) - theta_i x_i)``.
* ``"tilted-exact"``: every step drawn exactly from a tilt with a closed-form normaliser (``_exact_tilt``): the
  loss tilt ``P e^{t l} / M(t)`` (Gaussian steps, and subsampled ones under remove at a whole ``t``) or, for
  one repeated subsampled Gaussian under add, the output tilt; each sample has a proven upper bound.
* ``"tilted-one"``: one step, picked uniformly, drawn from its tilt whose mean loss is ``eps``
  (Def. 16, generalised to any family and heterogeneous steps);
  ``w = (T^-1 sum_i e^{theta_i x_i} / M_i(theta_i))^-1``.

Per sample the engine returns the total loss, ``log w`` and the log-probability of its discrete
choices (for the likelihood-ratio part of gradients).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from jaxdp.accountants import _cgf
from jaxdp.accountants.montecarlo import _exact_tilt
from jaxdp.accountants.montecarlo import _proposals as prop_mod

CHUNK = 4096
BLOCK = 256
ESTIMATORS = ("simple", "tilted", "tilted-one", "tilted-exact")


class Part(NamedTuple):
    mech: object  # one segment's mechanism (traced leaves allowed)
    count: int  # static number of steps


def total_steps(parts) -> int:
    return int(sum(p.count for p in parts))


def k012(parts, direction, t):
    """``K, K', K''`` of the composed parts at ``t``: each part's mechanism's ``cgf_derivatives`` (one traced rule)."""
    per_part = [p.mech.cgf_derivatives(t, direction) for p in parts]
    return tuple(sum(p.count * d[i] for p, d in zip(parts, per_part)) for i in range(3))


def saddle_t(parts, direction, eps):
    """``t* >= 0`` with ``sum n_i K_i'(t*) = eps + 1/t* + 1/(1 + t*)``, within ``[1e-4, 1e4]``: the library's
    saddle-point iteration (:func:`~jaxdp.accountants._cgf.solve_saddle_point`), from ``t = 1``; a sampler's tilt,
    so no derivative."""
    eps = jax.lax.stop_gradient(jnp.asarray(eps, jnp.float64))
    u = _cgf.solve_saddle_point(
        lambda t: k012(parts, direction, t)[1:], eps, jnp.zeros_like(eps), math.log(1e-4), math.log(1e4)
    )
    return jax.lax.stop_gradient(jnp.exp(u))


def plan_proposals(parts, direction, eps, estimator, theta_one=None):
    """Per-part fixed proposals for a query at ``eps``: ``[(proposal, base)]`` (``base``: ``P`` itself, the law
    of the untilted steps of ``"tilted-one"``, whose tilts are ``theta_one`` when given, one per part)."""
    eps = jax.lax.stop_gradient(jnp.asarray(eps, jnp.float64))
    laws = [p.mech.output_law(direction) for p in parts]
    if estimator == "simple":
        return [(prop_mod.untilted(law), None) for law in laws]
    if estimator == "tilted-exact":  # theta_one: the tilt (shape (1,)), else the one of the smallest range
        tilt = _exact_tilt.best_tilt(parts, direction, eps)[0] if theta_one is None else theta_one[0]
        return [(prop, None) for prop in _exact_tilt.proposals(parts, direction, tilt)]
    if estimator == "tilted-one":
        thetas = [prop_mod.solve_theta(law, eps) if theta_one is None else theta_one[i] for i, law in enumerate(laws)]
        return [(prop_mod.x_tilt(law, th), prop_mod.untilted(law)) for law, th in zip(laws, thetas)]
    t = saddle_t(parts, direction, eps)
    return [(prop_mod.loss_tilt(law, t), None) for law in laws]


def chunk_samples(parts, direction, estimator, proposals, key, chunk_id, size=CHUNK, with_grad=False):
    """``(L, log_w)`` of ``size`` samples of chunk ``chunk_id``: the total loss and the log weight ``log dP/dG``
    (whose derivative in the mechanism's parameters, ``with_grad``, is the likelihood-ratio term)."""
    key_c = jax.random.fold_in(key, chunk_id)
    steps_total = total_steps(parts)
    if estimator == "tilted-one":
        u = prop_mod.uniform(jax.random.fold_in(key_c, 0), (size,))
        pick = jnp.minimum(jnp.floor(u * steps_total), steps_total - 1).astype(jnp.int32)
    loss = jnp.zeros(size)
    log_w = jnp.zeros(size)
    lse = jnp.full(size, -jnp.inf)
    offset = 0
    for idx, part in enumerate(parts):
        law = part.mech.output_law(direction)
        prop, base = proposals[idx]
        width = min(part.count, BLOCK)
        num_blocks = -(-part.count // width)
        key_p = jax.random.fold_in(key_c, idx + 1)
        if estimator == "tilted-exact" and _exact_tilt.is_gaussian(part.mech):
            # the loss of Gaussian steps is linear in the output: their sum is one Gaussian draw, exactly
            ell, lw = _exact_tilt.gaussian_part_sums(prop, law, key_p, size, part.count)
            loss, log_w = loss + ell, log_w + lw
            offset += part.count
            continue

        def block(carry, b, law=law, prop=prop, base=base, width=width, part=part, key_p=key_p, offset=offset):
            loss, log_w, lse = carry
            steps = b * width + jnp.arange(width)
            valid = (steps < part.count)[None, :]
            k_b = jax.random.fold_in(key_p, b)
            if estimator == "tilted-one":
                tilted = (offset + steps)[None, :] == pick[:, None]
                x = prop_mod.draw(prop, k_b, (size, width), tilted, base)
                a = prop_mod.log_tilt_ratio(prop, x)
                lse = jnp.logaddexp(lse, jax.nn.logsumexp(jnp.where(valid, a, -jnp.inf), axis=1))
            elif estimator == "tilted-exact":
                x, ell = _exact_tilt.draw(prop, law, k_b, (size, width))
                log_w = log_w + jnp.sum(jnp.where(valid, _exact_tilt.log_weight(prop, ell), 0.0), axis=1)
            elif estimator == "tilted":
                x, log_g = prop_mod.draw_with_density(prop, k_b, (size, width))
                ell, log_p = law.loss_and_log_density(x)
                log_w = log_w + jnp.sum(jnp.where(valid, log_p - log_g, 0.0), axis=1)
            else:
                x = prop_mod.draw(prop, k_b, (size, width))
            if estimator not in ("tilted", "tilted-exact"):
                ell = law.loss(x)
            loss = loss + jnp.sum(jnp.where(valid, ell, 0.0), axis=1)
            if estimator not in ("tilted", "tilted-exact") and with_grad:
                ref = base if base is not None else prop
                if estimator == "simple":
                    ref = prop
                lr = law.log_density(x) - prop_mod.proposal_log_density(ref, x)
                log_w = log_w + jnp.sum(jnp.where(valid, lr, 0.0), axis=1)
            return (loss, log_w, lse), None

        (loss, log_w, lse), _ = jax.lax.scan(block, (loss, log_w, lse), jnp.arange(num_blocks))
        offset += part.count
    if estimator == "tilted-one":
        log_w = log_w + math.log(steps_total) - lse
    return loss, log_w


def log_h(loss, eps):
    """``log (1 - e^{eps - L})_+`` (``-inf`` where ``L <= eps``)."""
    d = eps - loss
    pos = d < 0
    return jnp.where(pos, jnp.log(-jnp.expm1(jnp.where(pos, d, -1.0))), -jnp.inf)


def map_chunks(fn, num_chunks: int, consts):
    """``stack([fn(c, consts) for c in range(num_chunks)])`` with the chunks spread over all local devices
    (``shard_map``; ``consts``, every traced value ``fn`` needs, is replicated); padded chunk ids
    (``>= num_chunks``) are passed too and must give zeros."""
    devices = jax.local_devices()
    n_dev = len(devices)
    padded = -(-num_chunks // n_dev) * n_dev
    ids = jnp.arange(padded, dtype=jnp.int32)
    mesh = Mesh(np.array(devices), ("chunks",))
    spec = PartitionSpec("chunks")
    replicated = jax.tree.map(lambda _: PartitionSpec(), consts)
    mapped = jax.shard_map(
        lambda c, k: jax.lax.map(lambda i: fn(i, k), c),
        mesh=mesh,
        in_specs=(spec, replicated),
        out_specs=spec,
        check_vma=False,
    )
    return mapped(ids, consts)


def ordered_sum(stats):
    """Sum over the leading (chunk) axis in chunk order: the same bits on any number of devices."""
    zero = jax.tree.map(lambda s: jnp.zeros(s.shape[1:], s.dtype), stats)
    total, _ = jax.lax.scan(lambda acc, s: (jax.tree.map(jnp.add, acc, s), None), zero, stats)
    return total
