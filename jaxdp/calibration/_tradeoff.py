"""``calibrate``: the (q, steps) trade-off at a budget, over the noise calibration."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.calibration._calibrate import calibrate_noise_multiplier
from jaxdp.calibration._result import CalibrationResult
from jaxdp.numerics import (
    float64_scope,
)
from jaxdp.numerics import validate as _validate

# -- a user objective over (sigma, q, steps) ------------------------------------------------------


class TradeoffResult(NamedTuple):
    """The outcome of :func:`calibrate`.

    Attributes:
      calibration: the final :class:`CalibrationResult` (sigma for the chosen q and whole steps,
        checked by ``certify``).
      objective: the objective at the final (sigma, q, steps).
      history: the objective along the optimisation (continuous steps, estimate-calibrated sigma);
        it stops early where the value or its gradient is not finite, and the best point is kept.
    """

    calibration: CalibrationResult
    objective: float
    history: np.ndarray


def _between(z, lo, hi):
    """``lo (hi / lo)^sigmoid(z)``: any real ``z`` to ``(lo, hi)``, geometrically."""
    return jnp.exp(jnp.log(lo) + jax.nn.sigmoid(z) * (jnp.log(hi) - jnp.log(lo)))


def _logit_of(x, lo, hi):
    u = (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo))
    u = min(max(u, 1e-6), 1 - 1e-6)
    return math.log(u / (1 - u))


@float64_scope
def calibrate(
    objective: Callable,
    *,
    target_epsilon,
    delta,
    sampling_prob,
    num_steps,
    optimizer=None,
    iterations: int = 100,
    q_range=(1e-4, 1.0),
    steps_range=(1.0, 1e6),
    method: str = "saddlepoint",
    certify: str | None = "certified-fast",
) -> TradeoffResult:
    """Minimises ``objective(sigma, q, steps)`` over ``(q, steps)`` with ``sigma`` calibrated to the budget.

    For every ``(q, steps)`` the noise multiplier is the smallest that meets
    ``eps <= target_epsilon`` at ``delta`` (by the estimate ``method``); its implicit
    gradients make ``objective`` a differentiable function of ``(q, steps)``, which an
    optax optimiser (default ``optax.adam(0.05)``) minimises over ``log q`` and
    ``log steps`` (kept inside ``q_range`` and ``steps_range``).  The answer is then
    rounded to whole steps and calibrated again with the ``certify`` check, so the
    returned configuration never exceeds the budget.

    Args:
      objective: ``(sigma, q, steps) -> scalar`` (JAX-traceable; steps continuous).
      target_epsilon, delta: the budget.
      sampling_prob, num_steps: the starting point.
      optimizer: an ``optax.GradientTransformation``.
      iterations: optimiser steps.
      q_range, steps_range: the search box.
      method: the estimate used while optimising (the final calibration uses ``characteristic``).
      certify: the certified accountant of the final check.

    Returns:
      A :class:`TradeoffResult`.

    Example:
      >>> import jaxdp
      >>> # noise of the averaged gradient, per step, plus a price on compute (epochs of 50,000 examples)
      >>> f = lambda s, q, t: (s / (q * 50_000)) ** 2 / t + 1e-9 * q * t
      >>> r = jaxdp.calibrate(f, target_epsilon=4.0, delta=1e-5, sampling_prob=0.01, num_steps=1000,
      ...                     iterations=30)  # doctest: +SKIP
      >>> float(r.calibration.epsilon_certified) <= 4.0, r.objective < float(r.history[0])  # doctest: +SKIP
      (True, True)

      (Skipped in the default test run for its compile time; ``tests/test_calibrate.py`` runs it, marked slow,
      and ``examples/calibrate_tradeoff.py`` is a complete script.)
    """
    import optax

    for name, value in [
        ("target_epsilon", target_epsilon),
        ("delta", delta),
        ("sampling_prob", sampling_prob),
        ("num_steps", num_steps),
    ]:
        if isinstance(value, jax.core.Tracer):
            raise ValueError(
                f"calibrate() runs an optimisation loop on the host and cannot be traced ({name} is a tracer): "
                "call it outside jax.jit/vmap/grad, or use calibrate_noise_multiplier, which is traceable."
            )
    _validate.positive("target_epsilon", target_epsilon)
    _validate.open_unit("delta", delta)
    _validate.probability("sampling_prob", sampling_prob)
    _validate.num_steps("num_steps", num_steps)
    q_lo, q_hi = (float(v) for v in q_range)
    n_lo, n_hi = (float(v) for v in steps_range)
    if not (0 < q_lo < q_hi <= 1) or not (1 <= n_lo < n_hi):
        raise ValueError("q_range must satisfy 0 < lo < hi <= 1 and steps_range 1 <= lo < hi.")
    opt = optax.adam(0.05) if optimizer is None else optimizer

    def loss(z):
        q = _between(z[0], q_lo, q_hi)
        n = _between(z[1], n_lo, n_hi)
        sigma = calibrate_noise_multiplier(
            target_epsilon=target_epsilon, delta=delta, sampling_prob=q, num_steps=n, method=method, certify=None
        ).noise_multiplier
        return objective(sigma, q, n)

    step = jax.jit(jax.value_and_grad(loss))
    z = jnp.array([_logit_of(float(sampling_prob), q_lo, q_hi), _logit_of(float(num_steps), n_lo, n_hi)])
    state = opt.init(z)
    history = []
    best_value, best_z = math.inf, z
    for _ in range(int(iterations)):
        value, grad = step(z)
        if not (np.isfinite(float(value)) and bool(jnp.all(jnp.isfinite(grad)))):
            break  # outside the region the estimate covers: keep the best point so far
        history.append(float(value))
        if float(value) < best_value:
            best_value, best_z = float(value), z
        updates, state = opt.update(grad, state, z)
        z = optax.apply_updates(z, updates)
    q = float(_between(best_z[0], q_lo, q_hi))
    n = float(max(1.0, round(float(_between(best_z[1], n_lo, n_hi)))))
    final = calibrate_noise_multiplier(  # the accurate estimate for the final answer
        target_epsilon=target_epsilon, delta=delta, sampling_prob=q, num_steps=n, certify=certify
    )
    value = float(objective(final.noise_multiplier, jnp.float64(q), jnp.float64(n)))
    return TradeoffResult(final, value, np.asarray(history))
