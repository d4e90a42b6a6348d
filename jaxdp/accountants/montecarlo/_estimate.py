"""Monte Carlo estimates of delta(eps) and eps(delta), with standard errors and confidence intervals."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from jaxdp.accountants import _cgf
from jaxdp.accountants.montecarlo import _engine, _exact_tilt
from jaxdp.accountants.montecarlo import _proposals as prop_mod
from jaxdp.mechanisms import as_composition
from jaxdp.numerics import argmax, bisect, float64_entry, float64_scope, pytree_dataclass, to_f64
from jaxdp.numerics import validate as _validate

__all__ = ["MonteCarloEstimate", "montecarlo_delta", "montecarlo_epsilon"]

#: points of the epsilon grid an epsilon query evaluates delta on (one pass over the samples)
GRID = 64
DEFAULT_SAMPLES = 1_000_000


@pytree_dataclass(data=("value", "stderr", "ci_low", "ci_high", "num_samples"), static=("estimator", "confidence"))
class MonteCarloEstimate:
    """A Monte Carlo estimate (not a bound) with its standard error and a normal confidence interval.

    Attributes:
      value: the estimate of delta (or epsilon).
      stderr: its standard error (for epsilon: delta's standard error over the slope of delta(eps)).
      ci_low, ci_high: the ``confidence`` interval (for epsilon: where the delta interval's ends cross
        the target delta).
      num_samples: the number of samples.
      estimator: ``"simple"``, ``"tilted"`` or ``"tilted-one"``.
      confidence: the interval's level.
    """

    value: jax.Array
    stderr: jax.Array
    ci_low: jax.Array
    ci_high: jax.Array
    num_samples: jax.Array
    estimator: str = "tilted"
    confidence: float = 0.95


def _z(confidence):
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + 0.5 * confidence)


@float64_scope
def parts_of(mechanism, num_steps):
    """The composition's segments as engine parts (concrete counts), checked for support."""
    _validate.num_steps("num_steps", num_steps)
    if not _validate.is_concrete(num_steps):
        raise ValueError("num_steps must be a concrete integer for method='montecarlo' (it sets the sample shape).")
    comp = as_composition(mechanism, num_steps)
    for m, n in zip(comp.mechanisms, comp.counts):
        if not _validate.is_concrete(n):
            raise ValueError("the counts of a composition must be concrete for method='montecarlo'.")
        if not prop_mod.supported(m):
            raise ValueError(
                f"method='montecarlo' supports Gaussian, Laplace and mixture-of-Gaussians mechanisms, got "
                f"{type(m).__name__}."
            )
    parts = tuple(_engine.Part(to_f64(m), round(float(n))) for m, n in comp.segments())
    return comp, parts


def check_samples(num_samples):
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
        raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}.")


def check_estimator(estimator):
    if estimator not in _engine.ESTIMATORS:
        raise ValueError(f"estimator must be one of {', '.join(map(repr, _engine.ESTIMATORS))}, got {estimator!r}.")


def raw_key(key):
    """The key's raw ``uint32`` data (typed or raw keys accepted)."""
    if key is None:
        raise ValueError("method='montecarlo' needs an explicit PRNG key: key=jax.random.key(seed).")
    if isinstance(key, (int, np.integer)):
        raise ValueError("key must be a JAX PRNG key (jax.random.key(seed)), not an integer.")
    if jnp.issubdtype(getattr(key, "dtype", None), jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(f"key must be a single PRNG key, got shape {key.shape}.")
        return jax.random.key_data(key)
    arr = jnp.asarray(key)
    if arr.dtype != jnp.uint32 or arr.shape != (2,):
        raise ValueError(f"key must be a JAX PRNG key (jax.random.key(seed)), got {key!r}.")
    return arr


# -- saddle-point starting values (the tilt and the epsilon grid are centred on them) --------------
def _approx_at_t(parts, direction, t):
    """(eps, log delta) of the leading saddle-point term at tilt ``t``."""
    return _cgf.leading_on_curve(*_engine.k012(parts, direction, t), t)


def approx_log_delta(parts, direction, eps):
    t = _engine.saddle_t(parts, direction, eps)
    return _approx_at_t(parts, direction, t)[1]


def approx_epsilon(parts, direction, log_delta):
    """Saddle-point epsilon for ``log_delta`` (``>= 0``)."""
    t = _cgf.tilt_for_log_delta(
        lambda t: _engine.k012(parts, direction, t), log_delta, math.log(1e-4), math.log(1e4), 60
    )
    eps, _ = _approx_at_t(parts, direction, t)
    return jax.lax.stop_gradient(jnp.maximum(jnp.nan_to_num(eps, nan=0.0), 0.0))


# -- one direction --------------------------------------------------------------------------------
def _chunk_f(parts, direction, estimator, proposals, key, c, num_samples, eps_grid, log_scale, with_grad):
    """Per-sample ``f = (1 - e^{eps - L})_+ w e^{-log_scale}`` and ``df/deps`` on the grid (zero beyond
    ``num_samples``)."""
    loss, log_w = _engine.chunk_samples(parts, direction, estimator, proposals, key, c, with_grad=with_grad)
    valid = ((c * _engine.CHUNK + jnp.arange(_engine.CHUNK)) < num_samples)[:, None]
    lw = (log_w - log_scale)[:, None]
    f = jnp.where(valid, jnp.exp(_engine.log_h(loss[:, None], eps_grid[None, :]) + lw), 0.0)
    above = valid & (loss[:, None] > eps_grid[None, :])
    df = jnp.where(above, -jnp.exp(eps_grid[None, :] - loss[:, None] + lw), 0.0)
    return f, df


def _plain_sums(mechs, eps_grid, tilt_eps, log_scale, key_data, statics, theta_one=None):
    counts, direction, estimator, num_samples = statics

    def one_chunk(c, consts):
        mechs, eps_grid, tilt_eps, log_scale, key_data, theta_one = consts
        parts = tuple(_engine.Part(m, n) for m, n in zip(mechs, counts))
        proposals = _engine.plan_proposals(parts, direction, tilt_eps, estimator, theta_one)
        key = jax.random.wrap_key_data(key_data)
        f, df = _chunk_f(parts, direction, estimator, proposals, key, c, num_samples, eps_grid, log_scale, False)
        return jnp.stack([jnp.sum(f, 0), jnp.sum(f * f, 0), jnp.sum(df, 0)])

    consts = (mechs, eps_grid, tilt_eps, log_scale, key_data, theta_one)
    return _engine.ordered_sum(_engine.map_chunks(one_chunk, -(-num_samples // _engine.CHUNK), consts))


def gradient_sums(mechs, eps_grid, tilt_eps, log_scale, key_data, statics):
    """Sums over the samples of ``f``, ``f^2``, ``df/deps``, ``2 f df/deps`` (each ``(G,)``) and of the
    per-sample derivatives in the mechanisms' flattened parameters ``p``: ``df/dp``, ``(df/dp)^2`` and
    ``2 f df/dp`` (each ``(G, P)``); the derivatives are pathwise in ``L`` and likelihood-ratio in the
    weight (the proposal is held fixed), so their means are unbiased for the derivatives of delta."""
    counts, direction, estimator, num_samples = statics
    flat, unravel = ravel_pytree(mechs)

    def one_chunk(c, consts):
        flat, eps_grid, tilt_eps, log_scale, key_data = consts
        key = jax.random.wrap_key_data(key_data)
        parts0 = tuple(_engine.Part(m, n) for m, n in zip(unravel(flat), counts))
        proposals = _engine.plan_proposals(parts0, direction, tilt_eps, estimator)

        def per_sample(p):
            parts = tuple(_engine.Part(m, n) for m, n in zip(unravel(p), counts))
            return _chunk_f(parts, direction, estimator, proposals, key, c, num_samples, eps_grid, log_scale, True)

        # one forward-mode pass per parameter
        (f, df), lin = jax.linearize(per_sample, flat)
        basis = jnp.eye(flat.shape[0], dtype=flat.dtype)
        jac = jnp.stack([lin(basis[k])[0] for k in range(flat.shape[0])], axis=-1)  # (B, G, P)
        return (
            jnp.stack([jnp.sum(f, 0), jnp.sum(f * f, 0), jnp.sum(df, 0), jnp.sum(2.0 * f * df, 0)]),
            jnp.stack([jnp.sum(jac, 0), jnp.sum(jac * jac, 0), jnp.sum(2.0 * f[..., None] * jac, 0)]),
        )

    consts = (flat, eps_grid, tilt_eps, log_scale, key_data)
    plain, jac = _engine.ordered_sum(_engine.map_chunks(one_chunk, -(-num_samples // _engine.CHUNK), consts))
    return plain, jac, unravel


@functools.partial(jax.custom_jvp, nondiff_argnums=(5,))
def _sums(mechs, eps_grid, tilt_eps, log_scale, key_data, statics):
    return _plain_sums(mechs, eps_grid, tilt_eps, log_scale, key_data, statics)


@_sums.defjvp
def _sums_jvp(statics, primals, tangents):
    mechs, eps_grid, tilt_eps, log_scale, key_data = primals
    t_mechs, t_eps = tangents[0], tangents[1]
    plain, jac, _ = gradient_sums(mechs, eps_grid, tilt_eps, log_scale, key_data, statics)
    t_flat, _ = ravel_pytree(jax.tree.map(_zero_float0, t_mechs, mechs))
    t_eps = _zero_float0(t_eps, eps_grid)
    d0 = jac[0] @ t_flat + plain[2] * t_eps
    d1 = jac[2] @ t_flat + plain[3] * t_eps
    # the derivative of sum df/deps is not computed (it feeds standard errors and interpolation slopes only)
    out = plain[:3]
    return out, jnp.stack([d0, d1, jnp.zeros_like(d0)])


def _zero_float0(t, like):
    if getattr(t, "dtype", None) == jax.dtypes.float0 or isinstance(t, jax.custom_derivatives.SymbolicZero):
        return jnp.zeros(jnp.shape(like), jnp.float64)
    return jnp.asarray(t, jnp.float64)


def direction_sums(parts, direction, estimator, key, num_samples, eps_grid, tilt_eps, log_scale):
    """``(sum f, sum f^2, sum df/deps)`` on ``eps_grid`` (each ``(G,)``, ``f`` scaled by ``e^-log_scale``);
    differentiable in the mechanisms and ``eps_grid`` (unbiased estimates of the derivatives of delta)."""
    statics = (tuple(p.count for p in parts), str(direction), estimator, int(num_samples))
    mechs = tuple(p.mech for p in parts)
    return _sums(mechs, eps_grid, tilt_eps, log_scale, jax.random.key_data(key), statics)


def _mean_se(sums, n):
    mean = sums[0] / n
    var = jnp.maximum(sums[1] / n - mean * mean, 0.0) * (n / max(n - 1, 1))
    return mean, jnp.sqrt(var / n), sums[2] / n


def _delta_impl(mechs, key_data, eps, *, counts, directions, estimator, num_samples, z):
    parts = tuple(_engine.Part(m, n) for m, n in zip(mechs, counts))
    key = jax.random.wrap_key_data(key_data)
    best = None
    for i, d in enumerate(directions):
        log_scale = jax.lax.stop_gradient(jnp.nan_to_num(approx_log_delta(parts, d, eps), nan=0.0))
        sums = direction_sums(parts, d, estimator, jax.random.fold_in(key, i), num_samples, eps[None], eps, log_scale)
        mean = sums[0] / num_samples
        se = jax.lax.stop_gradient(_mean_se(sums, num_samples)[1])  # (no derivative: sqrt at 0 would give NaN)
        scale = jnp.exp(log_scale)
        out = jnp.stack([mean[0] * scale, se[0] * scale])
        best = out if best is None else jnp.where(out[0] > best[0], out, best)
    return best


_delta_jit = jax.jit(_delta_impl, static_argnames=("counts", "directions", "estimator", "num_samples", "z"))


def _interp_root(grid, log_vals, log_slopes, target):
    """Root of the decreasing ``log delta(eps)`` through the grid values (cubic Hermite with slopes; NaN where
    the target is not bracketed by the grid)."""
    below = log_vals < target
    k = argmax(below)  # first grid point below the target
    ok = jnp.any(below) & (k > 0) & jnp.all(jnp.isfinite(log_vals[:1]))
    k = jnp.maximum(k, 1)
    x0, x1 = grid[k - 1], grid[k]
    y0, y1 = log_vals[k - 1], log_vals[k]
    h = x1 - x0
    m0 = jnp.where(jnp.isfinite(log_slopes[k - 1]), log_slopes[k - 1], (y1 - y0) / h) * h
    m1 = jnp.where(jnp.isfinite(log_slopes[k]) & jnp.isfinite(y1), log_slopes[k], (y1 - y0) / h) * h
    finite = jnp.isfinite(y1)

    def hermite(s):
        h00 = 2 * s**3 - 3 * s**2 + 1
        h10 = s**3 - 2 * s**2 + s
        h01 = -2 * s**3 + 3 * s**2
        h11 = s**3 - s**2
        return h00 * y0 + h10 * m0 + h01 * y1 + h11 * m1

    def linear_in_delta(s):  # where the upper value is delta = 0 (log -inf): interpolate delta itself
        return jnp.log(jnp.maximum((1 - s) * jnp.exp(y0) + s * jnp.where(finite, jnp.exp(y1), 0.0), 1e-300))

    def value(s):
        return jnp.where(finite, hermite(s), linear_in_delta(s))

    a, b = bisect(lambda m: value(m) >= target, jnp.asarray(0.0), jnp.asarray(1.0), 50)
    s = 0.5 * (a + b)
    return jnp.where(ok, x0 + s * h, jnp.nan), jnp.where(ok, k - 1 + s, jnp.nan)


def _epsilon_impl(mechs, key_data, log_delta, *, counts, directions, estimator, num_samples, z):
    parts = tuple(_engine.Part(m, n) for m, n in zip(mechs, counts))
    key = jax.random.wrap_key_data(key_data)
    best = None
    for i, d in enumerate(directions):
        eps0 = approx_epsilon(parts, d, log_delta)
        lo = jnp.maximum(0.5 * eps0 - 0.05, 0.0)
        hi = 1.6 * eps0 + 0.1
        grid = lo + (hi - lo) * jnp.linspace(0.0, 1.0, GRID)
        log_scale = jax.lax.stop_gradient(log_delta)
        sums = direction_sums(parts, d, estimator, jax.random.fold_in(key, i), num_samples, grid, eps0, log_scale)
        live_mean = sums[0] / num_samples  # the only value a derivative flows through (below)
        mean, se, dmean = jax.lax.stop_gradient(_mean_se(sums, num_samples))
        target = log_delta - log_scale
        log_mean = jnp.log(mean)
        eps_hat, pos = _interp_root(grid, log_mean, dmean / mean, target)
        # derivative by the implicit function theorem: d eps = -d log delta(eps) / (d log delta / d eps)
        pos_c = jnp.clip(jnp.nan_to_num(jax.lax.stop_gradient(pos)), 0.0, GRID - 1.0)
        k0 = jnp.minimum(jnp.floor(pos_c).astype(jnp.int32), GRID - 2)
        frac = pos_c - k0
        mean_at = (1.0 - frac) * live_mean[k0] + frac * live_mean[k0 + 1]  # interpolated in delta (safe at 0)
        moved = jnp.log(jnp.maximum(mean_at, 1e-300))
        log_slope = ((1.0 - frac) * dmean[k0] + frac * dmean[k0 + 1]) / jax.lax.stop_gradient(mean_at)
        eps_hat = jax.lax.stop_gradient(eps_hat) - (moved - jax.lax.stop_gradient(moved)) / log_slope
        eps_lo, _ = _interp_root(grid, jnp.log(jnp.maximum(mean - z * se, 0.0)), jnp.full(GRID, jnp.nan), target)
        eps_hi, _ = _interp_root(grid, jnp.log(mean + z * se), jnp.full(GRID, jnp.nan), target)
        # the standard error at the root: delta's, over the slope of delta(eps)
        se_at = jnp.interp(pos, jnp.arange(GRID, dtype=jnp.float64), se)
        slope_at = jnp.interp(pos, jnp.arange(GRID, dtype=jnp.float64), dmean)
        se_eps = se_at / jnp.abs(slope_at)
        # no sample beyond eps (delta estimate 0 everywhere on the grid's upper part) gives an open interval
        eps_lo = jnp.where(jnp.isnan(eps_lo) & (mean[0] - z * se[0] < jnp.exp(target)), lo, eps_lo)
        out = jnp.stack([eps_hat, se_eps, eps_lo, eps_hi])
        best = out if best is None else jnp.where((out[0] > best[0]) | jnp.isnan(out[0]), out, best)
    return best


_epsilon_jit = jax.jit(_epsilon_impl, static_argnames=("counts", "directions", "estimator", "num_samples", "z"))


def _statics(parts, comp, estimator, num_samples, confidence):
    directions = tuple(str(d.value) if hasattr(d, "value") else str(d) for d in comp.directions)
    if estimator == "tilted-exact" and not _exact_tilt.supported(parts):
        raise ValueError(
            "estimator='tilted-exact' samples Gaussian and Poisson-subsampled Gaussian steps only; use 'tilted' for "
            "this mechanism."
        )
    return dict(
        counts=tuple(p.count for p in parts),
        directions=directions,
        estimator=estimator,
        num_samples=int(num_samples),
        z=_z(confidence),
    )


def _check_common(key, num_samples, estimator, confidence):
    key_data = raw_key(key)
    check_samples(num_samples)
    check_estimator(estimator)
    if not (0.0 < float(confidence) < 1.0):
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}.")
    return key_data


def montecarlo_delta(
    mechanism,
    *,
    epsilon,
    num_steps=1,
    key,
    num_samples: int = DEFAULT_SAMPLES,
    estimator: str = "tilted",
    confidence: float = 0.95,
) -> MonteCarloEstimate:
    """Monte Carlo estimate of delta(epsilon) (an estimate, not a bound), with its standard error.

    ``delta(eps) = E_P[(1 - e^{eps - L})_+]`` over samples of the composed privacy loss ``L``; for
    ``add_or_remove`` the larger of the two directions.  Chunked (memory does not grow with
    ``num_samples``) and spread over all local devices; the same ``key`` gives the same estimate on
    any number of devices.

    Args:
      mechanism: a Gaussian, Laplace or mixture-of-Gaussians mechanism, or a composition of them.
      epsilon: ``>= 0``.
      num_steps: a concrete whole number ``>= 1``.
      key: a JAX PRNG key (``jax.random.key(seed)``); required.
      num_samples: number of samples (``>= 1``).
      estimator: ``"tilted"`` (importance sampling, every step tilted at the saddle point; default),
        ``"tilted-one"`` (one step tilted, Wang et al. 2023 Def. 16) or ``"simple"``.
      confidence: level of the normal confidence interval.

    Returns:
      A :class:`MonteCarloEstimate` of delta.

    Example:
      >>> import jax, jaxdp
      >>> est = jaxdp.montecarlo_delta(jaxdp.Gaussian(1.0), epsilon=1.0, key=jax.random.key(0),
      ...                              num_samples=100_000)
      >>> abs(float(est.value) - 0.126936) < 4 * float(est.stderr)   # Phi(-1/2) - e Phi(-3/2)
      True
    """
    key_data = _check_common(key, num_samples, estimator, confidence)
    _validate.nonnegative("epsilon", epsilon)
    comp, parts = parts_of(mechanism, num_steps)
    return _delta_entry(
        tuple(p.mech for p in parts),
        key_data,
        epsilon,
        _statics(parts, comp, estimator, num_samples, confidence),
        confidence,
    )


@functools.partial(float64_entry)
def _delta_entry(mechs, key_data, epsilon, statics, confidence):
    out = _delta_jit(mechs, key_data, jnp.asarray(epsilon, jnp.float64), **statics)
    return delta_estimate(out[0], out[1], statics, confidence)


def delta_estimate(value, se, statics, confidence):
    """The :class:`MonteCarloEstimate` of a delta ``value`` with standard error ``se`` (its normal interval, kept
    above 0)."""
    z = statics["z"]
    return MonteCarloEstimate(
        value,
        se,
        jnp.maximum(value - z * se, 0.0),
        value + z * se,
        jnp.asarray(statics["num_samples"]),
        statics["estimator"],
        float(confidence),
    )


def montecarlo_epsilon(
    mechanism,
    *,
    delta,
    num_steps=1,
    key,
    num_samples: int = DEFAULT_SAMPLES,
    estimator: str = "tilted",
    confidence: float = 0.95,
) -> MonteCarloEstimate:
    """Monte Carlo estimate of epsilon(delta) from one sample set (an estimate, not a bound).

    One pass over the samples evaluates delta on a grid of epsilons around the saddle-point value;
    epsilon is the root of the interpolated estimate.  The interval is where the ends of delta's
    confidence band cross ``delta``.  Arguments as :func:`montecarlo_delta`.

    Where the estimate does not cross ``delta`` on that grid (samples that do not see the loss ``delta`` needs,
    as the one-step tilt of a many-step composition's tail), ``value``, ``stderr`` and an end of the interval
    are NaN; called on concrete values it also warns (``RuntimeWarning``), naming the estimator.

    Example:
      >>> import jax, jaxdp
      >>> est = jaxdp.montecarlo_epsilon(jaxdp.Gaussian(1.0), delta=0.126936, key=jax.random.key(0),
      ...                                num_samples=100_000)
      >>> abs(float(est.value) - 1.0) < 4 * float(est.stderr)   # Gaussian(1): delta(1) = 0.126936
      True
    """
    key_data = _check_common(key, num_samples, estimator, confidence)
    _validate.open_unit("delta", delta)
    comp, parts = parts_of(mechanism, num_steps)
    est = _epsilon_entry(
        tuple(p.mech for p in parts),
        key_data,
        delta,
        _statics(parts, comp, estimator, num_samples, confidence),
        confidence,
    )
    if _validate.is_concrete(est.value) and np.isnan(np.asarray(est.value)).any():
        hint = "more samples" if estimator == "tilted" else "estimator='tilted' (every step tilted) or more samples"
        _validate.warn_at_caller(
            f"montecarlo_epsilon: the {estimator!r} estimate of delta does not cross delta = {float(delta):g} on its "
            f"grid of epsilons ({num_samples} samples do not see the losses it needs): value and stderr are NaN, the "
            f"interval's finite end still holds. Try {hint}.",
            RuntimeWarning,
        )
    return est


@functools.partial(float64_entry)
def _epsilon_entry(mechs, key_data, delta, statics, confidence):
    out = _epsilon_jit(mechs, key_data, jnp.log(jnp.asarray(delta, jnp.float64)), **statics)
    return MonteCarloEstimate(
        out[0], out[1], out[2], out[3], jnp.asarray(statics["num_samples"]), statics["estimator"], float(confidence)
    )
