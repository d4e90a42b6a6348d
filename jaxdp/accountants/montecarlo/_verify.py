"""The Monte Carlo DP verifier (Alg. 2 of Wang et al. 2023) and estimate-verify-release (Alg. 1).

``DPV(M, eps, delta_est)`` draws ``m`` samples of an unbiased estimator of ``delta(eps)`` and accepts when
the estimate is below ``delta_est / tau - Delta``.  With ``E[estimator^2] <= nu`` and
``m >= 2 nu / Delta^2 log(tau / delta_est)`` (Bennett's inequality, Thm 4.3; the estimator is
non-negative, so the lower tail needs only the second moment), a mechanism whose true
``delta(eps) > delta_est / tau`` is accepted with probability at most ``delta_est / tau``: releasing
after an accepted test is ``(eps, delta_est / tau)``-DP (Thm 3.2).  The offset is
``Delta = 0.4 (1/tau - 1/rho) delta_est`` with ``rho = (1 + tau) / 2`` (App. F), which keeps the
false-negative rate (rejecting a ``delta_est >= rho delta(eps)``) about as small.

Second-moment bounds ``nu`` (each a proven upper bound from a certified CGF bound):

* simple estimator, any mechanism: Cor. 19,
  ``nu = min_lam M(lam) e^{-eps lam} 4 lam^lam / (lam + 2)^(lam + 2)`` with ``log M = K_upper``;
* the one-step tilt of a homogeneous Poisson-subsampled Gaussian under ``"remove"``: App. E.3 (the
  first theorem there; ``theta sigma^2 >= 1``),
  ``nu = M_P(theta) ((eps / q + k) / k)^{-theta sigma^2} e^{-theta / 2} nu_simple``, ``theta`` chosen to
  minimise it.

and a range bound (``"tilted-exact"``, ``_exact_tilt``): every step drawn exactly from the privacy-loss tilt
``P e^{t l} / M(t)`` with a closed-form (or proven upper) ``log M``, so that ``0 <= Z <= b(t) =
e^{K(t) - t eps} (t / (1 + t))^t / (1 + t)`` and ``E[Z^2] <= b E[Z]``.  The false positive is worst when the true
``delta`` sits at ``delta_est / tau`` (``(Delta + s)^2 / (delta_est / tau + s)`` grows with ``s``), so
``nu = b delta_est / tau`` gives the same guarantee (``docs/evr_tilt.md``).  ``b`` is the saddle-point
accountant's own leading factor, tens of times ``delta`` where the simple estimator's ``nu`` is of the order of
``delta`` itself: the count falls by about ``delta / b`` times over ``b / delta``.

Each adjacency direction is verified on its own (the larger delta decides, so both must pass); the
verifier uses, per direction, the estimator with the smallest proven sample count (:func:`evr_plan` says which,
and the count, before anything is sampled).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.accountants.montecarlo import _engine, _exact_tilt
from jaxdp.accountants.montecarlo._estimate import _plain_sums, parts_of, raw_key
from jaxdp.mechanisms import PoissonSubsampledGaussian
from jaxdp.numerics import argmin, float64_scope, log1p, minimize_on_grid, pytree_dataclass
from jaxdp.numerics import validate as _validate

__all__ = ["EvrPlan", "EvrVerdict", "bennett_num_samples", "evr", "evr_offset", "evr_plan", "second_moment_bound"]

_LOG = logging.getLogger("jaxdp.evr")

#: the verifier refuses (rejects, "inconclusive") above this many samples unless told otherwise
DEFAULT_MAX_SAMPLES = 10**8
_LAMBDAS = np.exp(np.linspace(math.log(1e-3), math.log(2e3), 160))
_THETA_SIGMA2 = np.exp(np.linspace(0.0, math.log(200.0), 120))  # theta sigma^2 in [1, 200]


def evr_offset(*, tau, delta_est, rho=None):
    """The offset ``Delta = 0.4 (1/tau - 1/rho) delta_est`` (App. F), ``rho = (1 + tau) / 2`` by default.

    Example:
      >>> round(evr_offset(tau=0.9, delta_est=1e-5) / 1e-5, 6)   # 0.4 (1/0.9 - 1/0.95)
      0.023392
    """
    tau, rho = _check_tau_rho(tau, rho)
    return 0.4 * (1.0 / tau - 1.0 / rho) * float(delta_est)


def bennett_num_samples(*, nu, offset, tau, delta_est) -> int:
    """Samples for a tau-relaxed false-positive rate ``<= delta_est / tau`` (Thm 4.3):
    ``m = ceil(2 nu / offset^2 log(tau / delta_est))``.

    Example:
      >>> bennett_num_samples(nu=1e-10, offset=1e-6, tau=0.9, delta_est=1e-5)   # 200 log(9e4) = 2281.5
      2282
    """
    nu, offset, tau, delta_est = float(nu), float(offset), float(tau), float(delta_est)
    if not (nu >= 0 and offset > 0 and 0 < delta_est < tau):
        raise ValueError("bennett_num_samples needs nu >= 0, offset > 0 and 0 < delta_est < tau.")
    return max(1, math.ceil(2.0 * nu / offset**2 * math.log(tau / delta_est)))


def _check_tau(tau):
    tau = float(tau)
    if not (0.0 < tau < 1.0) or not math.isfinite(tau):
        raise ValueError(f"tau must lie in (0, 1), got {tau!r}.")
    return tau


def _check_tau_rho(tau, rho):
    """``(tau, rho)`` checked, ``rho = (1 + tau) / 2`` by default."""
    tau = _check_tau(tau)
    rho = (1.0 + tau) / 2.0 if rho is None else float(rho)
    if not tau < rho <= 1.0:
        raise ValueError(f"rho must lie in (tau, 1], got {rho!r} with tau = {tau!r}.")
    return tau, rho


def _log_nu_simple(comp, direction, eps):
    """Cor. 19 in logs, over a grid of lambda refined around its best point."""

    def f(lam):
        k = comp.cgf_upper(lam, direction)
        return k - eps * lam + math.log(4.0) + lam * jnp.log(lam) - (lam + 2.0) * jnp.log(lam + 2.0)

    value, _ = minimize_on_grid(f, jnp.asarray(_LAMBDAS))
    return jnp.minimum(value, 0.0)  # the estimator lies in [0, 1]


def _log_nu_one(sigma, q, k, eps, log_nu_simple):
    """App. E.3 (first theorem) for ``k`` steps of PSG(sigma, q) under remove, minimised over theta."""
    ts2 = jnp.asarray(_THETA_SIGMA2)
    theta = ts2 / sigma**2
    log_m = jnp.logaddexp(log1p(-q), jnp.log(q) + theta) + 0.5 * sigma**2 * theta**2
    log_nu = log_m - ts2 * jnp.log((eps / q + k) / k) - theta / 2.0 + log_nu_simple
    i = argmin(jnp.where(jnp.isfinite(log_nu), log_nu, jnp.inf))
    return log_nu[i], theta[i]


@float64_scope
def second_moment_bound(mechanism, *, epsilon, num_steps=1, estimator="simple", direction="remove"):
    """A proven upper bound ``nu`` on ``E[estimator^2]`` for one sample of the Monte Carlo estimator of
    ``delta(epsilon)`` (see the module notes), and the tilt it assumes (NaN for ``"simple"``).

    ``estimator="tilted-one"`` applies to a Poisson-subsampled Gaussian (repeated, ``"remove"``) only.

    Example:
      >>> import jaxdp
      >>> nu, _ = second_moment_bound(jaxdp.Gaussian(1.0), epsilon=1.0)
      >>> round(float(nu), 4), 0.1269 ** 2 <= float(nu)   # delta(1.0) = 0.1269: E[estimate^2] >= delta^2
      (0.1322, True)
    """
    _validate.nonnegative("epsilon", epsilon)
    comp, parts = parts_of(mechanism, num_steps)
    eps = jnp.asarray(epsilon, jnp.float64)
    log_simple = _log_nu_simple(comp, direction, eps)
    if estimator == "simple":
        return jnp.exp(log_simple), jnp.asarray(jnp.nan)
    if estimator != "tilted-one" or not _one_tilt_applies(parts, direction):
        raise ValueError(
            "a second-moment bound for importance sampling is available for the one-step tilt of a repeated "
            "PoissonSubsampledGaussian under 'remove' (estimator='tilted-one') only."
        )
    m = parts[0].mech
    log_nu, theta = _log_nu_one(
        jnp.asarray(m.noise_multiplier), jnp.asarray(m.sampling_prob), parts[0].count, eps, log_simple
    )
    return jnp.exp(log_nu), theta


def _one_tilt_applies(parts, direction):
    return (
        len(parts) == 1
        and isinstance(parts[0].mech, PoissonSubsampledGaussian)
        and str(getattr(direction, "value", direction)) == "remove"
        and float(parts[0].mech.sampling_prob) < 1.0
    )


@pytree_dataclass(
    data=("accepted", "epsilon", "delta", "delta_estimate", "threshold", "samples", "seconds"),
    static=("estimators",),
)
class EvrVerdict:
    """The verdict of estimate-verify-release for one or many candidates ``(epsilon, delta_est)``.

    Attributes:
      accepted: the verifier accepted: releasing is ``(epsilon, delta)``-DP.
      epsilon: the candidates' epsilon.
      delta: what an accepted release guarantees, ``delta_est / tau`` (NaN where rejected).
      delta_estimate: the Monte Carlo estimate of delta(epsilon) the test used (the worse direction).
      threshold: ``delta_est / tau - Delta``, the largest estimate accepted.
      samples: samples drawn per candidate (each direction's count, summed; for a batch the largest
        candidate's count is drawn once and shared, which only lowers the false-positive rate).
      seconds: wall time of the whole call.
      estimators: the estimator used per direction.
    """

    accepted: jax.Array
    epsilon: jax.Array
    delta: jax.Array
    delta_estimate: jax.Array
    threshold: jax.Array
    samples: jax.Array
    seconds: jax.Array
    estimators: tuple = ()


def _rounded_samples(m: int) -> int:
    """``m`` rounded up to a whole number of chunks on a quarter-power-of-two ladder (few distinct programs)."""
    chunks = -(-m // _engine.CHUNK)
    step = 2.0 ** math.floor(math.log2(chunks)) / 4.0 if chunks >= 8 else 1.0
    return int(math.ceil(chunks / step) * step) * _engine.CHUNK


@dataclasses.dataclass(frozen=True)
class EvrPlan:
    """What :func:`evr` will sample, decided before any sample is drawn.

    Attributes:
      directions: the adjacency directions verified (each must pass).
      estimators: per direction, the estimator with the smallest proven sample count.
      samples: per direction, the proven count for each candidate (an array shaped like the candidates).
      tilts: per direction, the tilt the estimator samples at (``None`` for ``"simple"``).
      counts: per direction, ``{estimator: the largest count over the candidates}`` for every estimator that
        applies (the chosen one is the smallest).
    """

    directions: tuple
    estimators: tuple
    samples: tuple
    tilts: tuple
    counts: tuple

    def __str__(self):
        parts = []
        for d, name, need, other in zip(self.directions, self.estimators, self.samples, self.counts):
            rest = ", ".join(f"{k} {v:.3g}" for k, v in other.items() if k != name)
            parts.append(f"{d}: {name}, {int(np.max(need)):,} samples" + (f" (against {rest})" if rest else ""))
        return "; ".join(parts)


def _candidates(epsilon, delta_est, tau):
    eps_arr, dest_arr = np.broadcast_arrays(np.asarray(epsilon, np.float64), np.asarray(delta_est, np.float64))
    _validate.nonnegative("epsilon", eps_arr.ravel())
    _validate.finite("delta_est", dest_arr.ravel())
    if np.any((dest_arr <= 0) | (dest_arr >= tau)):
        raise ValueError(f"delta_est must lie in (0, tau) = (0, {tau:g}), got {dest_arr.ravel()!r}.")
    return eps_arr, dest_arr


#: the count of an estimator whose bound is not finite (an unresolved upper normaliser): never chosen, never drawn
NO_BOUND = 2**62


def _needs(nu, offsets, tau, dest):
    return np.array(
        [
            bennett_num_samples(nu=n, offset=o, tau=tau, delta_est=e) if math.isfinite(n) else NO_BOUND
            for n, o, e in zip(nu, offsets, dest)
        ]
    )


def _plan(comp, parts, eps_flat, dest_flat, tau, offsets):
    directions = tuple(str(getattr(d, "value", d)) for d in comp.directions)
    estimators, samples, tilts, counts = [], [], [], []
    with jax.enable_x64(True):
        for d in directions:
            options = {}
            nu_s, _ = _nus(comp, parts, d, eps_flat, "simple")
            options["simple"] = (_needs(nu_s, offsets, tau, dest_flat), None)
            if _one_tilt_applies(parts, d):
                nu_o, theta = _nus(comp, parts, d, eps_flat, "tilted-one")
                need = _needs(nu_o, offsets, tau, dest_flat)
                # one tilt for the batch: that of the candidate needing most samples
                options["tilted-one"] = (need, jnp.asarray([theta[int(np.argmax(need))]]))
            if _exact_tilt.supported(parts):
                options["tilted-exact"] = _exact_option(parts, d, eps_flat, dest_flat, offsets, tau)
            name = min(options, key=lambda k: options[k][0].max())
            estimators.append(name)
            samples.append(options[name][0])
            tilts.append(options[name][1])
            counts.append({k: int(v[0].max()) for k, v in options.items()})
    return EvrPlan(directions, tuple(estimators), tuple(samples), tuple(tilts), tuple(counts))


def _exact_option(parts, d, eps_flat, dest_flat, offsets, tau):
    """The exact tilt's counts: ``nu = b delta_est / tau`` with ``b`` its proven range, at one tilt for the batch
    (the best one of the candidate needing most samples; every candidate's count is taken at that tilt)."""
    mechs, counts = tuple(p.mech for p in parts), tuple(p.count for p in parts)
    tilt, log_b = _best_exact_tilts(mechs, jnp.asarray(eps_flat), counts, d)
    need = _needs(np.exp(np.asarray(log_b)) * dest_flat / tau, offsets, tau, dest_flat)
    chosen = jnp.asarray([np.asarray(tilt)[int(np.argmax(need))]])
    log_b = _exact_ranges_at(mechs, jnp.asarray(eps_flat), chosen[0], counts, d)
    return _needs(np.exp(np.asarray(log_b)) * dest_flat / tau, offsets, tau, dest_flat), chosen


@functools.partial(jax.jit, static_argnums=(2, 3))
def _best_exact_tilts(mechs, eps, counts, direction):
    parts = tuple(_engine.Part(m, n) for m, n in zip(mechs, counts))
    return jax.vmap(lambda e: _exact_tilt.best_tilt(parts, direction, e))(eps)


@functools.partial(jax.jit, static_argnums=(3, 4))
def _exact_ranges_at(mechs, eps, tilt, counts, direction):
    parts = tuple(_engine.Part(m, n) for m, n in zip(mechs, counts))
    return jax.vmap(lambda e: _exact_tilt.log_range(parts, direction, e, tilt))(eps)


def evr_plan(mechanism, *, num_steps=1, epsilon, delta_est, tau: float = 0.9, rho: float | None = None) -> EvrPlan:
    """The estimator and proven sample count :func:`evr` would use, per direction, without sampling.

    Example:
      >>> import jaxdp
      >>> plan = jaxdp.evr_plan(jaxdp.Gaussian(2.0), num_steps=4, epsilon=1.0, delta_est=0.126937)
      >>> plan.estimators, plan.counts[0]["tilted-exact"] < plan.counts[0]["simple"] / 2
      (('tilted-exact',), True)
    """
    tau, rho = _check_tau_rho(tau, rho)
    eps_arr, dest_arr = _candidates(epsilon, delta_est, tau)
    comp, parts = parts_of(mechanism, num_steps)
    offsets = 0.4 * (1.0 / tau - 1.0 / rho) * dest_arr.ravel()
    plan = _plan(comp, parts, eps_arr.ravel(), dest_arr.ravel(), tau, offsets)
    return dataclasses.replace(plan, samples=tuple(n.reshape(eps_arr.shape) for n in plan.samples))


def evr(
    mechanism,
    *,
    num_steps=1,
    epsilon,
    delta_est,
    tau: float = 0.9,
    rho: float | None = None,
    key,
    max_samples: int = DEFAULT_MAX_SAMPLES,
) -> EvrVerdict:
    """Estimate-verify-release: verify candidate ``(epsilon, delta_est)`` pairs by Monte Carlo (Alg. 2).

    An accepted candidate may be released as ``(epsilon, delta_est / tau)``-DP: a mechanism whose true
    delta(epsilon) exceeds ``delta_est / tau`` passes with probability at most ``delta_est / tau``.  The
    sample count comes from Bennett's inequality with a proven second-moment bound, per adjacency
    direction, with the estimator whose count is smallest (:func:`evr_plan`; logged on ``jaxdp.evr`` before
    sampling): the simple estimator, the one-step tilt (a repeated Poisson-subsampled Gaussian under
    ``"remove"``) or the exact loss tilt (Gaussian and Poisson-subsampled Gaussian steps), whose proven range
    makes it orders of magnitude cheaper at the deltas DP-SGD is released at (the counts:
    ``benchmarks/results/evr.md``).  A candidate needing more than
    ``max_samples`` is rejected (reported with ``samples`` the count it would need).

    Args:
      mechanism: as :func:`montecarlo_delta`.
      num_steps: a concrete whole number.
      epsilon, delta_est: the candidates (scalars or arrays broadcast together; one call verifies them all).
      tau: the tolerated relative underestimate in ``(0, 1)`` (the release's delta is ``delta_est / tau``).
      rho: the false-negative slack, ``(1 + tau) / 2`` by default.
      key: a JAX PRNG key.
      max_samples: the most samples drawn per direction.

    Returns:
      An :class:`EvrVerdict`.

    Example:
      >>> import jax, jaxdp
      >>> m = jaxdp.Gaussian(2.0)   # 4 steps: mu = 1, delta(1.0) = 0.126937 (closed form)
      >>> v = jaxdp.evr(m, num_steps=4, epsilon=1.0, delta_est=[0.126937, 0.5 * 0.126937], key=jax.random.key(0))
      >>> [bool(a) for a in v.accepted], v.estimators
      ([True, False], ('tilted-exact',))
    """
    start = time.perf_counter()
    tau, rho = _check_tau_rho(tau, rho)
    key_data = raw_key(key)
    if not (isinstance(max_samples, (int, np.integer)) and max_samples >= 1):
        raise ValueError(f"max_samples must be an integer >= 1, got {max_samples!r}.")
    eps_arr, dest_arr = _candidates(epsilon, delta_est, tau)
    shape = eps_arr.shape
    eps_flat, dest_flat = eps_arr.ravel(), dest_arr.ravel()
    comp, parts = parts_of(mechanism, num_steps)
    offsets = 0.4 * (1.0 / tau - 1.0 / rho) * dest_flat
    thresholds = dest_flat / tau - offsets
    plan = _plan(comp, parts, eps_flat, dest_flat, tau, offsets)
    _LOG.info("jaxdp.evr: %s", plan)
    worst = np.full(eps_flat.shape, -np.inf)
    total = np.zeros(eps_flat.shape, dtype=np.int64)
    ok_all = np.ones(eps_flat.shape, dtype=bool)
    with jax.enable_x64(True):
        for i, (d, name, need, tilt) in enumerate(zip(plan.directions, plan.estimators, plan.samples, plan.tilts)):
            feasible = need <= max_samples
            m = int(need[feasible].max()) if feasible.any() else 0
            total += need
            if m == 0:
                ok_all &= False
                continue
            m_run = min(_rounded_samples(m), max(max_samples, m))
            statics = (tuple(p.count for p in parts), d, name, int(m_run))
            key_d = jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(key_data), i))
            sums = _sums_jit(
                tuple(p.mech for p in parts),
                jnp.asarray(eps_flat),
                jnp.asarray(float(np.median(eps_flat))),
                jnp.asarray(0.0),
                key_d,
                statics,
                tilt,
            )
            est = np.asarray(sums[0]) / m_run
            worst = np.maximum(worst, est)
            ok_all &= feasible & (est < thresholds)
    accepted = ok_all
    released = np.where(accepted, dest_flat / tau, np.nan)
    seconds = time.perf_counter() - start
    with jax.enable_x64(True):  # eager results in float64 whatever the user's x64 flag
        return EvrVerdict(
            jnp.asarray(accepted.reshape(shape)),
            jnp.asarray(eps_arr, dtype=jnp.float64),
            jnp.asarray(released.reshape(shape), dtype=jnp.float64),
            jnp.asarray(worst.reshape(shape), dtype=jnp.float64),
            jnp.asarray(thresholds.reshape(shape), dtype=jnp.float64),
            jnp.asarray(total.reshape(shape), dtype=jnp.int64),
            jnp.asarray(seconds, dtype=jnp.float64),
            plan.estimators,
        )


_sums_jit = jax.jit(_plain_sums, static_argnames=("statics",))


def _nus(comp, parts, direction, eps_flat, estimator):
    """``nu`` (and the tilt) per candidate epsilon, as numpy arrays (one compiled program per shape)."""
    eps = jnp.asarray(eps_flat)
    if estimator == "simple":
        return np.exp(np.asarray(_log_nus_simple(comp, eps, direction))), None
    m = parts[0].mech
    sigma, q = jnp.asarray(m.noise_multiplier), jnp.asarray(m.sampling_prob)
    log_nu, theta = _log_nus_one(comp, sigma, q, eps, direction, parts[0].count)
    return np.exp(np.asarray(log_nu)), np.asarray(theta)


@functools.partial(jax.jit, static_argnums=(2,))
def _log_nus_simple(comp, eps, direction):
    return jax.vmap(lambda e: _log_nu_simple(comp, direction, e))(eps)


@functools.partial(jax.jit, static_argnums=(4, 5))
def _log_nus_one(comp, sigma, q, eps, direction, count):
    return jax.vmap(lambda e: _log_nu_one(sigma, q, count, e, _log_nu_simple(comp, direction, e)))(eps)
