"""Group privacy: epsilon against the group size ``g = 1..G``, one vectorised call.

The group of ``g`` records is accounted exactly by a mixture-of-Gaussians mechanism (Ganesh 2024):
sensitivity ``Binomial(g, q)`` under Poisson sampling (Thm 3.1), ``2 Hypergeometric(B, n + g, g)`` with a
fixed batch of ``B`` out of ``n`` (Thm 3.3).  Every group size is padded to the same ``G + 1`` (or
``min(G, B) + 1``) components with zero weights, so one traced program serves all ``g``.  Beside it, the
black-box conversion of the example-level guarantee: ``(eps_1, delta_1)``-DP for one record gives
``(g eps_1, g e^{(g - 1) eps_1} delta_1)`` for ``g`` (Vadhan 2017, Lemma 2.2), the smallest such ``g eps_1``
at the target delta, read off the example-level curve ``delta_1(eps_1)`` of the same accountant.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from jaxdp.accountants._api import epsilon_for_delta, log_delta_for_epsilon
from jaxdp.mechanisms import MixtureOfGaussians
from jaxdp.numerics import float64_entry, host_regula_falsi
from jaxdp.numerics import validate as _validate

__all__ = ["GroupCurve", "group_curve", "group_weights"]

#: points of the example-level curve delta_1(eps_1) read by the black-box conversion
BLACK_BOX_POINTS = 48
#: the relative width to which the black-box conversion narrows each crossing (its reported end is the upper)
BLACK_BOX_RTOL = 1e-7
#: accountant evaluations spent narrowing one crossing, at most
BLACK_BOX_MAX_EVALUATIONS = 40


class GroupCurve(NamedTuple):
    """epsilon at one delta for groups of ``1..G`` records (float64 arrays of length ``G``).

    Attributes:
      group_sizes: ``1..G``.
      epsilon: the group's epsilon from its mixture-of-Gaussians mechanism (tight).
      black_box_epsilon: ``g eps_1`` from the example-level guarantee (``inf`` where no ``eps_1`` up to
        the examined range makes ``g e^{(g - 1) eps_1} delta_1(eps_1) <= delta``).
      sampling: ``"poisson"`` or ``"fixed"``.
      method: the accountant.
    """

    group_sizes: np.ndarray
    epsilon: np.ndarray
    black_box_epsilon: np.ndarray
    sampling: str
    method: str


def group_weights(
    max_group_size,
    *,
    sampling="poisson",
    sampling_prob=None,
    dataset_size=None,
    batch_size=None,
    adjacency="add_or_remove",
):
    """``(sensitivities (C,), probs (G, C))``: the mixtures of groups ``g = 1..G``, padded with zero weights.

    Poisson: ``c_j = j``, ``p_j = Binomial(g, q)``; fixed batches of ``B`` out of a training set of ``N``:
    ``c_j = 2 j``, ``p_j = Hypergeometric(B, n + g, g)`` with ``n = N - g`` (``N`` under ``"add"`` adjacency),
    as :meth:`~jaxdp.MixtureOfGaussians.fixed_batch_group` (rounded to dominate the exact law).

    Example:
      >>> import numpy as np
      >>> c, p = group_weights(2, sampling_prob=0.5)
      >>> c.tolist(), np.round(p, 12).tolist()
      ([0.0, 1.0, 2.0], [[0.5, 0.5, 0.0], [0.25, 0.5, 0.25]])
    """
    big_g = _validate.integer("max_group_size", max_group_size)
    if sampling == "poisson":
        rows = [
            MixtureOfGaussians.poisson_group(1.0, sampling_prob, g, adjacency=adjacency).probs
            for g in range(1, big_g + 1)
        ]
        scale = 1.0
    elif sampling == "fixed":
        rows = [
            MixtureOfGaussians.fixed_batch_group(
                1.0, dataset_size=dataset_size, batch_size=batch_size, group_size=g, adjacency=adjacency
            ).probs
            for g in range(1, big_g + 1)
        ]
        scale = 2.0
    else:
        raise ValueError(f"sampling must be 'poisson' or 'fixed', got {sampling!r}.")
    width = len(rows[-1])  # G + 1, or min(G, B) + 1 for a fixed batch
    probs = np.zeros((big_g, width))
    for g, row in enumerate(rows):
        probs[g, : len(row)] = row
    return scale * np.arange(width, dtype=np.float64), probs


@float64_entry
def group_curve(
    *,
    noise_multiplier,
    num_steps,
    delta,
    max_group_size,
    sampling: str = "poisson",
    sampling_prob=None,
    dataset_size=None,
    batch_size=None,
    method: str | None = None,
    adjacency="add_or_remove",
) -> GroupCurve:
    """epsilon for groups of ``1..max_group_size`` records, and the black-box conversion beside it.

    Args:
      noise_multiplier: ``> 0``.
      num_steps: steps of DP-SGD (a whole number ``>= 1``).
      delta: the target delta in ``(0, 1)`` (the same for every group size).
      max_group_size: ``G``, an integer ``>= 1``.
      sampling: ``"poisson"`` (with ``sampling_prob``) or ``"fixed"`` (``batch_size`` out of
        ``dataset_size``, sampled without replacement).
      method: the accountant (default: ``"certified"``, a proven upper bound).
      adjacency: of the records (``"add_or_remove"``, ``"remove"`` or ``"add"``).

    Returns:
      :class:`GroupCurve`.  Both curves come from the same accountant: with a certified method both
      are proven upper bounds, and the black-box one is looser by construction.

    Example:
      >>> import jaxdp
      >>> c = jaxdp.group_curve(noise_multiplier=2.0, sampling_prob=0.01, num_steps=2000, delta=1e-6,
      ...                       max_group_size=4, method="characteristic")
      >>> [round(float(e), 2) for e in c.epsilon]   # dp_accounting's PLD: 1.03, 2.20, -, 4.77
      [1.03, 2.2, 3.45, 4.77]
      >>> bool(c.black_box_epsilon[3] > c.epsilon[3])   # the black-box conversion: 5.20
      True
    """
    _validate.positive("noise_multiplier", noise_multiplier)
    _validate.num_steps("num_steps", num_steps)
    _validate.open_unit("delta", delta)
    c, probs = group_weights(
        max_group_size,
        sampling=sampling,
        sampling_prob=sampling_prob,
        dataset_size=dataset_size,
        batch_size=batch_size,
        adjacency=adjacency,
    )
    sigma = float(noise_multiplier)

    def mech(p):
        return MixtureOfGaussians(sigma, jnp.asarray(c), p, adjacency)

    if method is None:
        from jaxdp.accountants._api import default_method

        method = default_method(mech(jnp.asarray(probs[-1])), num_steps)
    # one compiled program for every g (the padded shapes are equal); a Python loop over it, not a vmap: the
    # accountants' root solves batched together run every lane to the slowest one's iteration count, and
    # a vmapped or lax.map-ped copy of them takes far longer to compile
    eps = jnp.stack(
        [epsilon_for_delta(mech(jnp.asarray(p)), delta=delta, num_steps=num_steps, method=method) for p in probs]
    )
    example = MixtureOfGaussians(sigma, jnp.asarray(c[:2]), jnp.asarray(probs[0, :2]), adjacency)
    black_box = _black_box(example, probs.shape[0], eps[0], delta, num_steps, method)
    return GroupCurve(
        np.arange(1, probs.shape[0] + 1),
        np.asarray(eps, np.float64),
        np.asarray(black_box, np.float64),
        sampling,
        method,
    )


def _black_box(example, big_g, eps1, delta, num_steps, method):
    """``g eps_1`` at the smallest ``eps_1`` with ``g e^{(g - 1) eps_1} delta_1(eps_1) <= delta``, per ``g``.

    Every reported ``eps_1`` is a point where the accountant itself was evaluated and met the condition, so
    with a certified accountant ``(g eps_1, delta)`` is a proven guarantee (Vadhan 2017, Lemma 2.2).  The
    condition ``h_g(e) = log g + (g - 1) e + log delta_1(e) - log delta <= 0`` is first read at
    ``BLACK_BOX_POINTS`` values of ``e`` from ``eps_1(delta)`` up (no smaller ``e`` can qualify:
    ``g e^{(g-1) e} >= 1``); between the last point that fails and the first that holds, a safeguarded
    regula falsi on evaluations of the accountant narrows the crossing to ``BLACK_BOX_RTOL`` and reports its
    upper end.  No qualifying point up to the examined range: ``inf``.  ``delta_1 = 0`` (a bounded loss)
    reads as ``log 0 = -inf`` and qualifies; a NaN never does.
    """
    g = np.arange(1, big_g + 1, dtype=np.float64)
    eps1 = float(eps1)
    log_target = math.log(delta)

    def log_d1(e):
        return float(log_delta_for_epsilon(example, epsilon=e, num_steps=num_steps, method=method))

    def h(k, e, ld):
        return math.log(g[k]) + (g[k] - 1.0) * e + ld - log_target

    top = max(4.0 * big_g * eps1, eps1 + 20.0)
    coarse = eps1 + (top - eps1) * np.linspace(0.0, 1.0, BLACK_BOX_POINTS) ** 2
    log_coarse = [log_d1(e) for e in coarse]
    out = np.full(big_g, np.inf)
    out[0] = eps1  # one record: the example-level guarantee itself
    for k in range(1, big_g):
        hs = np.array([h(k, e, ld) for e, ld in zip(coarse, log_coarse)])
        with np.errstate(invalid="ignore"):
            hits = np.flatnonzero(hs <= 0.0)  # NaN fails
        if hits.size == 0:
            continue
        i = hits[0]
        if i == 0:
            out[k] = g[k] * coarse[0]
            continue
        hi = host_regula_falsi(
            lambda x, k=k: h(k, x, log_d1(x)),
            coarse[i - 1],
            coarse[i],
            hs[i - 1],
            hs[i],
            rtol=BLACK_BOX_RTOL,
            max_evaluations=BLACK_BOX_MAX_EVALUATIONS,
        )
        out[k] = g[k] * hi
    return out
