"""The ``"tilted-exact"`` estimator: every step drawn exactly from the privacy-loss tilt ``P e^{t l} / M(t)``,
weighted with a closed-form or proven upper ``log M``, so that each sample's value has a proven upper bound (its
*range*), which the verifier turns into a sample count.

With ``L`` the composed privacy loss, ``h(L) = (1 - e^{eps - L})_+`` and ``K(t) = sum_i log M_i(t)``, the estimator
``Z = h(L) e^{-t L + K(t)}`` on samples of the tilt is unbiased for ``delta(eps)``, and maximising over
``u = L - eps > 0`` gives ``0 <= Z <= b(t) = e^{K(t) - t eps} (t / (1 + t))^t / (1 + t)``.  Where the weight uses
an upper bound ``K_up >= K`` instead of ``K``, ``Z``'s mean is ``delta e^{K_up - K} >= delta`` (a conservative
estimate) and its range is ``b`` with ``K_up``.  ``docs/evr_tilt.md`` holds the proofs.  The tilts:

* a Gaussian step: ``N(1 + t, s^2)`` under remove and ``N(-t, s^2)`` under add, ``log M = t (1 + t) / (2 s^2)``
  (any ``t > 0``);
* a Poisson-subsampled Gaussian step under remove, with ``n = 1 + t`` a whole number:
  ``P e^{t l} = N(0, s^2) R^n``, ``R = 1 - q + q e^{(x - 1/2) / s^2}``, is by the binomial expansion the mixture
  of ``N(k, s^2)``, ``k = 0..n``, with weights ``C(n, k) (1 - q)^{n - k} q^k e^{k (k - 1) / (2 s^2)}``, whose sum is
  ``M(t)`` (exact);
* a Poisson-subsampled Gaussian step under add (``q < 1``): ``P e^{t l} = N(0, s^2) R^{-t}``, and
  ``R >= 1 - q``, so a draw of ``N(0, s^2)`` accepted with probability ``((1 - q) / R(x))^t`` has exactly that law
  (rejection sampling); ``log M`` is the certified machinery's proven upper bound (``cgf_upper``), and ``t`` is
  kept to ``t (-log(1 - q)) <= REJECT_LOG`` so that most draws are accepted.

No table, no quadrature node and no fitted normaliser enters the law sampled: its range is that of what is sampled.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.accountants.montecarlo import _proposals as prop_mod
from jaxdp.mechanisms import Gaussian, PoissonSubsampledGaussian
from jaxdp.numerics import argmin

#: the largest tilt ``t`` of a Poisson-subsampled step under remove (its tilted law has ``t + 2`` components)
MAX_ORDER = 255
#: under add, a subsampled step's rejection keeps a draw with probability at least ``e^{-REJECT_LOG}``
REJECT_LOG = 0.25
#: rounds of rejection before a slot is given up (NaN); at least 78 % of draws are kept, so 1e6 slots need ~10
MAX_ROUNDS = 1000
#: margin added to every proven log range: float64 rounding in the sums
LOG_MARGIN = 1e-9
_GAUSS_TILTS = np.exp(np.linspace(math.log(1e-3), math.log(1e3), 481))
_WHOLE_TILTS = np.arange(1.0, MAX_ORDER + 1.0)


class ExactProposal(NamedTuple):
    """One step's exactly sampled tilt: ``N(mu, s^2)`` (``cum`` of length one), a mixture ``sum_k pi_k N(k, s^2)``
    (``cum``: its cumulative probabilities; ``mu`` unused), or, with ``cap`` (the largest loss), ``N(mu, s^2)``
    thinned by rejection; the step's log weight is ``log dP/dG = log_m - a l(x)``."""

    cum: jax.Array
    mu: jax.Array
    s: jax.Array
    a: jax.Array
    log_m: jax.Array
    cap: jax.Array | None


def supported(parts) -> bool:
    """Whether the loss tilt of every step can be sampled exactly (Gaussian and Poisson-subsampled Gaussian steps,
    either direction)."""
    return all(isinstance(p.mech, (Gaussian, PoissonSubsampledGaussian)) for p in parts)


def _subsampled(mech) -> bool:
    return isinstance(mech, PoissonSubsampledGaussian)


def whole_tilts_only(parts, direction) -> bool:
    """Under remove, the tilt of a subsampled step is a finite mixture for a whole ``t`` only."""
    return direction == "remove" and any(_subsampled(p.mech) for p in parts)


def largest_tilt(parts, direction):
    """Under add, ``t (-log(1 - q)) <= REJECT_LOG`` for every subsampled step (rejection keeps most draws)."""
    caps = []
    for p in parts:
        if direction == "add" and _subsampled(p.mech):
            q = jnp.asarray(p.mech.sampling_prob, jnp.float64)
            # (q = 1: the step is the Gaussian, drawn without rejection, any tilt)
            caps.append(jnp.where(q < 1.0, REJECT_LOG / -jnp.log1p(-jnp.where(q < 1.0, q, 0.0)), jnp.inf))
    return functools.reduce(jnp.minimum, caps, jnp.asarray(jnp.inf))


def _sq(m):
    s = jnp.asarray(m.noise_multiplier, jnp.float64)
    q = jnp.asarray(m.sampling_prob, jnp.float64) if _subsampled(m) else None
    return s, q


def _psg_log_terms(s, q, t):
    """``log`` of the ``MAX_ORDER + 2`` component weights of ``N(0, s^2) R^{1 + t}`` (whole ``t``; ``-inf`` past
    ``n = 1 + t``)."""
    n = 1.0 + t
    k = jnp.arange(MAX_ORDER + 2, dtype=jnp.float64)
    live = k <= n
    kk = jnp.where(live, k, 0.0)
    log_1mq = jnp.where(q < 1.0, jnp.log1p(-jnp.where(q < 1.0, q, 0.0)), -jnp.inf)
    rest = n - kk
    gammaln = jax.scipy.special.gammaln
    binom = gammaln(n + 1.0) - gammaln(kk + 1.0) - gammaln(rest + 1.0)
    # (n - k) log(1 - q) with 0 log 0 = 0 (q = 1 keeps the k = n term alone)
    zero_side = jnp.where(rest > 0, rest * log_1mq, 0.0)
    terms = binom + zero_side + kk * jnp.log(q) + kk * (kk - 1.0) / (2.0 * s * s)
    return jnp.where(live, terms, -jnp.inf)


def whole(parts, direction, t):
    """The tilt the steps are drawn at: ``t`` rounded to a whole number (at least 1) where a subsampled step
    needs one, at most :func:`largest_tilt` (one tilt for every step: the weights combine into ``e^{-t L}``)."""
    t = jnp.asarray(t, jnp.float64)
    if whole_tilts_only(parts, direction):
        return jnp.clip(jnp.round(t), 1.0, float(MAX_ORDER))
    return jnp.minimum(t, largest_tilt(parts, direction))


def step_log_m(mech, direction, t):
    """``log M(t) = log E_P e^{t l}`` of one step: in closed form (a Gaussian, any ``t >= 0``; a
    Poisson-subsampled Gaussian under remove, whole ``t``), or a proven upper bound (subsampled, under add)."""
    s, q = _sq(mech)
    if q is None:
        return t * (1.0 + t) / (2.0 * s * s)
    if direction == "add":  # (q = 1: the Gaussian's closed form)
        return jnp.where(q < 1.0, mech.cgf_upper(t, "add"), t * (1.0 + t) / (2.0 * s * s))
    return jax.nn.logsumexp(_psg_log_terms(s, q, t))


def log_range(parts, direction, eps, t):
    """Proven ``log`` of the largest value of ``Z`` under the loss tilt ``t > 0`` (``t`` may be an array; it is
    first made a tilt the steps can be drawn at, :func:`whole`)."""
    t = whole(parts, direction, t)
    k = sum(p.count * jnp.vectorize(lambda tt, m=p.mech: step_log_m(m, direction, tt))(t) for p in parts)
    return k - t * eps + t * jnp.log(t / (1.0 + t)) - jnp.log1p(t) + LOG_MARGIN


def best_tilt(parts, direction, eps):
    """``(tilt, log range)`` minimising the proven range over a grid of tilts (traceable; ``eps`` scalar)."""
    tilts = jnp.asarray(_WHOLE_TILTS if whole_tilts_only(parts, direction) else _GAUSS_TILTS)
    tilts = jnp.unique(whole(parts, direction, tilts), size=tilts.shape[0], fill_value=jnp.nan)
    logs = log_range(parts, direction, eps, tilts)
    logs = jnp.where(jnp.isnan(logs), jnp.inf, logs)
    i = argmin(logs)
    return tilts[i], logs[i]


def proposals(parts, direction, tilt):
    """Per part, the exactly sampled tilt of its steps (held fixed: no derivative flows through it)."""
    tilt = jax.lax.stop_gradient(whole(parts, direction, tilt))
    out = []
    for p in parts:
        s, q = _sq(p.mech)
        s = jax.lax.stop_gradient(s)
        log_m = jax.lax.stop_gradient(step_log_m(p.mech, direction, tilt))
        one = jnp.ones(1)
        if q is None:
            # in the coordinates of Gaussian.output_law: P = N(1, s^2) under remove, N(0, s^2) under add
            mu = 1.0 + tilt if direction == "remove" else -tilt
            out.append(ExactProposal(one, mu, s, tilt, log_m, None))
        elif direction == "add":  # N(0, s^2) drawn, kept with probability ((1 - q) / R)^t
            q = jax.lax.stop_gradient(q)
            gauss = q >= 1.0  # then P e^{tl} is N(-t, s^2), drawn as it is (a cap of -inf keeps every draw)
            cap = jnp.where(gauss, -jnp.inf, -jnp.log1p(-jnp.where(gauss, 0.0, q)))
            out.append(ExactProposal(one, jnp.where(gauss, -tilt, 0.0), s, tilt, log_m, cap))
        else:
            terms = _psg_log_terms(s, jax.lax.stop_gradient(q), tilt)
            cum = jnp.cumsum(jnp.exp(terms - jax.nn.logsumexp(terms)))
            # P(K <= k) for k below the last live component 1 + t, +inf from it on: a uniform above the rounded sum
            # of the others (a few ulps below 1) picks the last live component, never one past it
            cum = jnp.where(jnp.arange(cum.shape[0]) < 1.0 + tilt, cum, jnp.inf)
            out.append(ExactProposal(cum, jnp.zeros(()), s, tilt, log_m, None))
    return out


def draw(prop, law, key, shape):
    """``(x, l(x))``: outputs drawn exactly from the tilt ``prop`` of the step ``law``, and their losses."""
    if prop.cap is not None:
        return _draw_rejected(prop, law, key, shape)
    k_u, k_z = jax.random.split(key)
    z = prop_mod.normal(k_z, shape)
    if prop.cum.shape[0] == 1:
        x = prop.mu + prop.s * z
    else:
        x = _pick(prop.cum, prop_mod.uniform(k_u, shape)).astype(jnp.float64) + prop.s * z
    return x, law.loss(x)


#: a tilted law with at most this many finite cumulative probabilities (components but the last) picks its
#: component by comparing the uniform with each of them, vectorised; a longer one by a binary search per draw, whose
#: gathers cost more than the rest of a sampled step (`benchmarks/results/evr.md`)
PICK_BY_COMPARE = 16


def _pick(cum, u):
    """The component ``k`` (its mean is ``k``) of each uniform ``u``: how many cumulative probabilities it reaches
    (``cum``: ascending, ``+inf`` past the last live component, so ``k`` is at most that component)."""

    def compare(n):  # (exact where every finite entry is among the first n)
        return sum((u >= cum[j]).astype(jnp.int32) for j in range(n))

    if cum.shape[0] <= PICK_BY_COMPARE:
        return compare(cum.shape[0])
    return jax.lax.cond(
        jnp.isinf(cum[PICK_BY_COMPARE]),
        lambda: compare(PICK_BY_COMPARE),
        lambda: jnp.searchsorted(cum, u, side="right", method="scan").astype(jnp.int32),
    )


def _draw_rejected(prop, law, key, shape):
    """Draws of ``N(0, s^2)`` kept with probability ``e^{t (l(x) - cap)}`` (``cap`` the largest loss), redrawn
    where refused until every slot holds a kept draw: the kept draws have the tilt's law exactly."""

    def attempt(i):
        k_x, k_u = jax.random.split(jax.random.fold_in(key, i))
        x = prop.mu + prop.s * prop_mod.normal(k_x, shape)
        ell = law.loss(x)
        keep = jnp.log(prop_mod.uniform(k_u, shape)) < prop.a * (ell - prop.cap)
        return x, ell, keep

    def body(c):
        i, x, ell, done = c
        x2, ell2, keep = attempt(i)
        take = ~done & keep
        return i + 1, jnp.where(take, x2, x), jnp.where(take, ell2, ell), done | keep

    x, ell, done = attempt(0)
    # (should a step keep nothing, its slots are NaN after MAX_ROUNDS: never a loop without end)
    _, x, ell, done = jax.lax.while_loop(lambda c: ~jnp.all(c[3]) & (c[0] < MAX_ROUNDS), body, (1, x, ell, done))
    return jnp.where(done, x, jnp.nan), jnp.where(done, ell, jnp.nan)


def is_gaussian(mech) -> bool:
    return isinstance(mech, Gaussian)


def gaussian_part_sums(prop, law, key, size, count):
    """``(sum of losses, sum of log weights)`` of ``count`` Gaussian steps drawn from the tilt ``prop``, from one
    draw of their output's sum (``N(count mu, count s^2)``: the loss ``sign (x - 1/2) / s^2`` is linear)."""
    total = count * prop.mu + prop.s * math.sqrt(count) * prop_mod.normal(key, (size,))
    ell = law.sign * (total - 0.5 * count) / (prop.s * prop.s)
    return ell, count * prop.log_m - prop.a * ell


def log_weight(prop, ell):
    """``log dP/dG`` of one step (with a proven upper ``log M``, an upper bound on it)."""
    return prop.log_m - prop.a * ell
