"""Online accounting: epsilon(delta) after every step ``k = 1..K`` from one sample set, in one jitted call.

Each of ``num_samples`` sample paths draws step ``k`` from a fixed proposal and keeps its running loss and
log importance weight; the prefix of a path is a valid importance sample of the ``k``-step composition,
so one set of paths gives the whole curve.  After each step epsilon is the root of the estimated
``log delta(eps)`` (Newton steps kept inside a bracket, started from the previous step's epsilon).
With ``"tilted"`` every step is tilted at the saddle point of the ``K``-step composition (the early
steps of the curve, whose epsilon is larger per step, are then estimated less precisely: see
``stderr``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxdp.accountants.montecarlo import _engine
from jaxdp.accountants.montecarlo import _families as fam_mod
from jaxdp.accountants.montecarlo._estimate import (
    _check_common,
    _z,
    approx_epsilon,
    parts_of,
)
from jaxdp.numerics import float64_entry, pytree_dataclass
from jaxdp.numerics import validate as _validate

__all__ = ["OnlineCurve", "online_epsilon"]

NEWTON_STEPS = 12


@pytree_dataclass(data=("steps", "epsilon", "stderr", "ci_low", "ci_high"), static=("confidence",))
class OnlineCurve:
    """epsilon(delta) after each step, Monte Carlo estimates (not bounds) with standard errors.

    Attributes:
      steps: ``1..K``.
      epsilon: the estimate after each step.
      stderr: its standard error (delta's, over the slope of delta(eps)).
      ci_low, ci_high: the ``confidence`` interval (delta's normal interval mapped through the slope).
      confidence: the interval's level.
    """

    steps: jax.Array
    epsilon: jax.Array
    stderr: jax.Array
    ci_low: jax.Array
    ci_high: jax.Array
    confidence: float = 0.95


def _stats(loss, log_w, eps, n):
    """``(S, S', var)`` of ``f = (1 - e^{eps - L})_+ w`` at ``eps`` (``S`` the mean, ``S'`` its eps-derivative)."""
    above = loss > eps
    e = jnp.where(above, jnp.exp(eps - loss + log_w), 0.0)
    w = jnp.where(above, jnp.exp(log_w), 0.0)
    f = w - e
    s = jnp.sum(f) / n
    var = jnp.maximum(jnp.sum(f * f) / n - s * s, 0.0) * n / max(n - 1, 1)
    return s, -jnp.sum(e) / n, var


def _solve(loss, log_w, log_delta, start, hi, n):
    """epsilon with ``log S(eps) = log_delta``: bracketed Newton on ``log S`` from ``start``."""

    def body(_, state):
        a, b, x = state
        s, ds, _ = _stats(loss, log_w, x, n)
        above = s >= jnp.exp(log_delta)
        a = jnp.where(above, x, a)
        b = jnp.where(above, b, x)
        step = (jnp.log(jnp.maximum(s, 1e-300)) - log_delta) / jnp.where(ds < 0, ds / jnp.maximum(s, 1e-300), -1.0)
        x_new = x - step
        ok = (s > 0) & jnp.isfinite(x_new) & (x_new > a) & (x_new < b)
        return a, b, jnp.where(ok, x_new, 0.5 * (a + b))

    _, _, x = jax.lax.fori_loop(0, NEWTON_STEPS, body, (jnp.zeros(()), hi, start))
    return x


def _online_impl(mech, key_data, log_delta, *, max_steps, directions, estimator, num_samples, z):
    key = jax.random.wrap_key_data(key_data)
    n = num_samples
    worst = None
    for i, d in enumerate(directions):
        part = _engine.Part(mech, max_steps)
        fam = fam_mod.family(mech, d)
        eps_k = approx_epsilon((part,), d, log_delta)
        if estimator == "tilted":
            prop = fam_mod.loss_tilt(fam, _engine.saddle_t((part,), d, eps_k))
        else:
            prop = fam_mod.untilted(fam)
        key_d = jax.random.fold_in(key, i)
        hi = 10.0 * eps_k + 10.0

        def step(carry, k, fam=fam, prop=prop, key_d=key_d, hi=hi):
            loss, log_w, prev = carry
            kk = jax.random.fold_in(key_d, k)
            if estimator == "tilted":
                x, log_g = fam_mod.draw_with_density(prop, kk, (n,))
                ell, log_p = fam_mod.loss_and_log_density(fam, x)
                log_w = log_w + log_p - log_g
            else:
                x = fam_mod.draw(prop, kk, (n,))
                ell = fam_mod.loss(fam, x)
            loss = loss + ell
            eps = _solve(loss, log_w, log_delta, prev, hi, n)
            s, ds, var = _stats(loss, log_w, eps, n)
            se = jnp.sqrt(var / n) / jnp.abs(ds)
            ok = (s > 0) & (ds < 0)
            eps = jnp.where(ok, eps, jnp.nan)
            return (loss, log_w, jnp.where(ok, eps, prev)), jnp.stack([eps, jnp.where(ok, se, jnp.nan)])

        init = (jnp.zeros(n), jnp.zeros(n), jnp.zeros(()))
        _, out = jax.lax.scan(step, init, jnp.arange(max_steps))
        worst = out if worst is None else jnp.where((out[:, :1] > worst[:, :1]) | jnp.isnan(out[:, :1]), out, worst)
    return worst


_online_jit = jax.jit(_online_impl, static_argnames=("max_steps", "directions", "estimator", "num_samples", "z"))


def online_epsilon(
    mechanism,
    *,
    delta,
    max_steps: int,
    key,
    num_samples: int = 100_000,
    estimator: str = "tilted",
    confidence: float = 0.95,
) -> OnlineCurve:
    """epsilon(delta) after every step ``1..max_steps`` of ``mechanism`` from one Monte Carlo sample set.

    What a training loop shows as it runs, in one jitted call: ``num_samples`` sample paths of the
    privacy loss are extended step by step, and epsilon is re-solved after each step.  Estimates, not
    bounds (see :class:`OnlineCurve`).

    Args:
      mechanism: one step (a Gaussian, Laplace or mixture-of-Gaussians mechanism).
      delta: in ``(0, 1)``.
      max_steps: ``K``, a whole number ``>= 1``.
      key: a JAX PRNG key.
      num_samples: sample paths.
      estimator: ``"tilted"`` (every step tilted at the ``K``-step saddle point) or ``"simple"``.
      confidence: level of the intervals.

    Example:
      >>> import jax, jaxdp
      >>> c = jaxdp.online_epsilon(jaxdp.Gaussian(10.0), delta=1e-5, max_steps=100, key=jax.random.key(0),
      ...                          num_samples=20_000)
      >>> c.epsilon.shape, bool(abs(float(c.epsilon[-1]) - 4.3659) < 4 * float(c.stderr[-1]))
      ((100,), True)
    """
    key_data = _check_common(key, num_samples, estimator, confidence)
    if estimator not in ("tilted", "simple"):
        raise ValueError(f"online_epsilon's estimator must be 'tilted' or 'simple', got {estimator!r}.")
    _validate.open_unit("delta", delta)
    _validate.num_steps("max_steps", max_steps)
    if not _validate.is_concrete(max_steps):
        raise ValueError("max_steps must be a concrete integer.")
    if hasattr(mechanism, "counts"):
        raise ValueError("online_epsilon takes one step's mechanism, not a Composition.")
    comp, parts = parts_of(mechanism, 1)
    statics = dict(
        max_steps=int(max_steps),
        directions=tuple(str(getattr(d, "value", d)) for d in comp.directions),
        estimator=estimator,
        num_samples=int(num_samples),
        z=_z(confidence),
    )
    return _online_entry(parts[0].mech, key_data, delta, statics, float(confidence))


@functools.partial(float64_entry)
def _online_entry(mech, key_data, delta, statics, confidence):
    out = _online_jit(mech, key_data, jnp.log(jnp.asarray(delta, jnp.float64)), **statics)
    eps, se = out[:, 0], out[:, 1]
    z = statics["z"]
    steps = jnp.arange(1, statics["max_steps"] + 1)
    return OnlineCurve(steps, eps, se, jnp.maximum(eps - z * se, 0.0), eps + z * se, confidence)
