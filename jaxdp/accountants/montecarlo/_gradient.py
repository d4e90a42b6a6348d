"""Unbiased Monte Carlo derivatives of delta(eps) and eps(delta) in the mechanism's parameters, with their standard
errors (pathwise in the privacy loss, likelihood-ratio in the importance weight)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from jaxdp.accountants.montecarlo import _engine
from jaxdp.accountants.montecarlo._estimate import (
    DEFAULT_SAMPLES,
    MonteCarloEstimate,
    _check_common,
    _epsilon_entry,
    _statics,
    approx_log_delta,
    delta_estimate,
    gradient_sums,
    parts_of,
)
from jaxdp.numerics import float64_entry, pytree_dataclass
from jaxdp.numerics import validate as _validate

__all__ = ["MonteCarloGradient", "montecarlo_grad"]


@pytree_dataclass(data=("estimate", "grad", "stderr"))
class MonteCarloGradient:
    """A Monte Carlo estimate with unbiased estimates of its derivatives in the mechanism's parameters.

    Attributes:
      estimate: the :class:`MonteCarloEstimate` of delta (or epsilon).
      grad: derivatives of delta (or epsilon) in the parameters, shaped like the mechanism (for a
        composition of several segments: a tuple, one per segment, as :meth:`Composition.segments`).
      stderr: their standard errors, shaped like ``grad``.
    """

    estimate: MonteCarloEstimate
    grad: object
    stderr: object


def _grad_impl(mechs, key_data, eps, *, counts, directions, estimator, num_samples, z):
    parts = tuple(_engine.Part(m, n) for m, n in zip(mechs, counts))
    n = num_samples
    best = None
    for i, d in enumerate(directions):
        log_scale = jax.lax.stop_gradient(jnp.nan_to_num(approx_log_delta(parts, d, eps), nan=0.0))
        key_d = jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(key_data), i))
        plain, jac, _ = gradient_sums(mechs, eps[None], eps, log_scale, key_d, (counts, d, estimator, n))
        scale = jnp.exp(log_scale)
        mean = plain[0, 0] / n
        se = jnp.sqrt(jnp.maximum(plain[1, 0] / n - mean**2, 0.0) * n / max(n - 1, 1) / n)
        slope = plain[2, 0] / n  # d delta / d eps
        g = jac[0, 0] / n
        g_se = jnp.sqrt(jnp.maximum(jac[1, 0] / n - g**2, 0.0) * n / max(n - 1, 1) / n)
        out = jnp.concatenate([jnp.stack([mean, se, slope]) * scale, g * scale, g_se * scale])
        best = out if best is None else jnp.where(out[0] > best[0], out, best)
    return best


_grad_jit = jax.jit(_grad_impl, static_argnames=("counts", "directions", "estimator", "num_samples", "z"))


def montecarlo_grad(
    mechanism,
    *,
    epsilon=None,
    delta=None,
    num_steps=1,
    key,
    num_samples: int = DEFAULT_SAMPLES,
    estimator: str = "tilted",
    confidence: float = 0.95,
) -> MonteCarloGradient:
    """Monte Carlo estimates of delta(epsilon) (or epsilon(delta)) and of their derivatives in the mechanism's
    parameters (noise multiplier, sampling probability, ...), each with its standard error.

    The derivatives are pathwise in the privacy loss and likelihood-ratio in the importance weight (the
    proposal is held fixed), so they are unbiased; for epsilon, ``d eps = -d delta / (d delta / d eps)`` at
    the estimated epsilon, from the same samples.  ``jax.grad`` of :func:`montecarlo_delta` or
    :func:`montecarlo_epsilon` gives the same derivatives without their standard errors.

    Give exactly one of ``epsilon`` and ``delta``; the other arguments are those of :func:`montecarlo_delta`.

    Example:
      >>> import jax, jaxdp
      >>> r = jaxdp.montecarlo_grad(jaxdp.Gaussian(1.0), epsilon=1.0, key=jax.random.key(0), num_samples=50_000)
      >>> float(r.grad.noise_multiplier) < 0 < float(r.stderr.noise_multiplier)   # more noise, smaller delta
      True
    """
    key_data = _check_common(key, num_samples, estimator, confidence)
    if (epsilon is None) == (delta is None):
        raise ValueError("give exactly one of epsilon and delta.")
    comp, parts = parts_of(mechanism, num_steps)
    if estimator == "tilted-exact":
        raise ValueError("estimator='tilted-exact' has no gradient estimator; use 'tilted' or 'simple'.")
    statics = _statics(parts, comp, estimator, num_samples, confidence)
    mechs = tuple(p.mech for p in parts)
    if delta is not None:
        _validate.open_unit("delta", delta)
        eps_est = _epsilon_entry(mechs, key_data, delta, statics, confidence)
        eps = eps_est.value
    else:
        _validate.nonnegative("epsilon", epsilon)
        eps = epsilon
    return _grad_entry(mechs, key_data, eps, statics, confidence, delta is not None, mechanism)


@functools.partial(float64_entry)
def _grad_entry(mechs, key_data, eps, statics, confidence, for_epsilon, like):
    out = _grad_jit(mechs, key_data, jnp.asarray(eps, jnp.float64), **statics)
    n_p = (out.shape[0] - 3) // 2
    mean, se, slope = out[0], out[1], out[2]
    g, g_se = out[3 : 3 + n_p], out[3 + n_p :]
    z = statics["z"]
    if for_epsilon:  # implicit function: d eps = -d delta / slope; delta's interval mapped through the slope
        g, g_se = -g / slope, g_se / jnp.abs(slope)
        est = MonteCarloEstimate(
            jnp.asarray(eps),
            se / jnp.abs(slope),
            eps - z * se / jnp.abs(slope),
            eps + z * se / jnp.abs(slope),
            jnp.asarray(statics["num_samples"]),
            statics["estimator"],
            float(confidence),
        )
    else:
        est = delta_estimate(mean, se, statics, confidence)
    _, unravel = ravel_pytree(mechs)
    grads, ses = unravel(g), unravel(g_se)
    if len(mechs) == 1:
        grads, ses = grads[0], ses[0]
    return MonteCarloGradient(est, grads, ses)
