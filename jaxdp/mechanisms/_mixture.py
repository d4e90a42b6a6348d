"""Mixtures of Gaussians: the Poisson-subsampled Gaussian and general mixtures (log ratio, its slope and inverse)."""

from __future__ import annotations

import fractions
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.mechanisms._base import (
    AbstractMechanism,
    Adjacency,
    _adjacency,
    _check_direction,
    _check_under,
    _f64,
    by_direction,
    is_static_direction,
)
from jaxdp.mechanisms._log_ratio import log_ratio
from jaxdp.mechanisms._quadrature import (
    NODES_PER_WINDOW,
    NODES_PER_WINDOW_POSITIVE,
    checked_moments,
    k0_resolved,
    mixture_rule,
    rule_log_moment,
    rule_tilted_abs_moment,
)
from jaxdp.numerics import pytree_dataclass
from jaxdp.numerics import validate as _validate


def _nodes_per_window(direction):
    # remove: lam = 1 + t, positive for t > -1 (every accountant uses t > 0), where the integrand's features
    # are at least unit-wide and fewer nodes suffice; a traced direction takes the larger rule of the two
    if is_static_direction(direction) and direction == "remove":
        return NODES_PER_WINDOW_POSITIVE
    return NODES_PER_WINDOW


class MixtureMechanism(AbstractMechanism):
    """Shared maths of mixture-of-Gaussians pairs; subclasses give the mixture."""

    direction_as_data: ClassVar[bool] = True

    def mixture(self):
        """Returns ``(log_p, c, sigma)`` as float64 arrays."""
        raise NotImplementedError

    def _rule(self, lam, direction):
        log_p, c, s = self.mixture()
        return mixture_rule(jnp.real(lam), log_p, c / s, nodes_per_window=_nodes_per_window(direction))

    def cgf(self, t, direction="remove"):
        _check_direction(direction)
        t = jnp.asarray(t)
        lam = by_direction(direction, 1.0 + t, -t)
        return rule_log_moment(lam, self._rule(lam, direction))

    def gaussian_mu2(self):
        # E_Q[R^2] = sum_jk p_j p_k exp(b_j b_k) (integer order: no quadrature)
        log_p, c, s = self.mixture()
        b = c / s
        return jax.nn.logsumexp(log_p[:, None] + log_p[None, :] + b[:, None] * b[None, :])

    def tilted_abs_moment(self, t, direction="remove"):
        # Under "remove", E_P[e^{tL} g(L)] = E_Q[R^{1+t} g(log R)]; under "add",
        # L = -log R and E_P[e^{tL} g(L)] = E_Q[R^{-t} g(-log R)].
        _check_direction(direction)
        t = jnp.asarray(t)
        lam, sign = by_direction(direction, (1.0 + t, 1.0), (-t, -1.0))
        return rule_tilted_abs_moment(lam, sign, self._rule(lam, direction))

    def checked_moments(self, t, direction="remove"):
        _check_direction(direction)
        t = _f64(t)
        lam, sign = by_direction(direction, (1.0 + t, 1.0), (-t, -1.0))
        log_p, c, s = self.mixture()
        return checked_moments(lam, sign, log_p, c / s, nodes_per_window=_nodes_per_window(direction))

    def cgf_upper(self, t, direction="remove"):
        m = self.checked_moments(t, direction)
        # the finer rule's K plus the two halves' disagreement (which bounds the error of the finer
        # rule many times over where the rule converges geometrically); only K need be resolved
        ok = k0_resolved(m.k0, m.k0_error)
        return jnp.where(ok, m.k0 + jax.lax.stop_gradient(m.k0_error), jnp.inf)

    def max_privacy_loss(self, direction="remove"):
        _check_direction(direction)
        log_p, c, _ = self.mixture()
        present = log_p > -jnp.inf
        # remove: log R grows without bound unless every present sensitivity is 0
        remove = jnp.where(jnp.any(present & (c > 0)), jnp.inf, 0.0)
        # add: L = -log R and R >= p_0 (the mass of the zero-sensitivity components)
        add = -jax.nn.logsumexp(jnp.where(c == 0, log_p, -jnp.inf))
        return by_direction(direction, remove, add)

    def _log_ratio(self, x):
        log_p, c, s = self.mixture()
        return log_ratio(jnp.asarray(x), log_p, c, s)

    def privacy_loss(self, x, direction="remove"):
        _check_direction(direction)
        lr = self._log_ratio(x)
        return by_direction(direction, lr, -lr)

    def sample_output(self, key, shape=(), *, direction="remove", under="P"):
        _check_direction(direction)
        _check_under(under)
        if not is_static_direction(direction):
            raise ValueError("sample_output needs direction 'remove' or 'add' (a string), not a traced flag.")
        log_p, c, s = self.mixture()
        k_idx, k_z = jax.random.split(key)
        z = jax.random.normal(k_z, shape, dtype=jnp.float64) * s
        mixture_side = (direction == "remove") == (under == "P")
        if not mixture_side:
            return z
        j = jax.random.categorical(k_idx, log_p, shape=shape)
        return z + c[j]


def _check_mixture(sensitivities, probs):
    if not (_validate.is_concrete(sensitivities) and _validate.is_concrete(probs)):
        return
    c = np.asarray(sensitivities, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    if c.ndim != 1 or p.ndim != 1 or c.shape != p.shape or c.size == 0:
        raise ValueError(
            "sensitivities and probs must be 1-D sequences of the same nonzero length, "
            f"got shapes {c.shape} and {p.shape}."
        )
    _validate.nonnegative("sensitivities", c)
    _validate.finite("probs", p)
    if np.any(p < 0) or abs(p.sum() - 1.0) > 1e-9:
        raise ValueError(f"probs must be >= 0 and sum to 1, got {np.array2string(p)}.")


def _as_leaf(x):
    if isinstance(x, (list, tuple)):
        return np.asarray(x, dtype=np.float64)
    return x


@pytree_dataclass(data=("noise_multiplier", "sensitivities", "probs"), static=("adjacency",))
class MixtureOfGaussians(MixtureMechanism):
    """Mixture-of-Gaussians mechanism (Ganesh 2024; Choquette-Choo et al.).

    The sensitivity is random: ``c_j >= 0`` with probability ``p_j``. Under
    ``"remove"`` the dominating pair is ``P = sum_j p_j N(c_j, s^2)``,
    ``Q = N(0, s^2)`` with ``s`` the noise multiplier; ``"add"`` swaps them.
    Group privacy of ``k`` records under Poisson sampling is the special case
    ``c = 0..k``, ``p = Binomial(k, q)`` (:meth:`poisson_group`).

    Example:
      >>> import jaxdp
      >>> m = jaxdp.MixtureOfGaussians(1.0, sensitivities=[0.0, 1.0], probs=[0.9, 0.1])
      >>> round(float(m.cgf(-1.0)), 10)   # E_P[exp(-L)] = 1
      0.0
    """

    noise_multiplier: float
    sensitivities: np.ndarray
    probs: np.ndarray
    adjacency: Adjacency = Adjacency.ADD_OR_REMOVE

    def __post_init__(self):
        _validate.positive("noise_multiplier", self.noise_multiplier)
        object.__setattr__(self, "sensitivities", _as_leaf(self.sensitivities))
        object.__setattr__(self, "probs", _as_leaf(self.probs))
        _check_mixture(self.sensitivities, self.probs)
        object.__setattr__(self, "adjacency", _adjacency(self.adjacency))

    @classmethod
    def poisson_group(cls, noise_multiplier, sampling_prob, group_size: int, *, adjacency="add_or_remove"):
        """Group of ``group_size`` records under Poisson sampling (Ganesh 2024, Thm 3.1)."""
        _validate.probability("sampling_prob", sampling_prob)
        if not isinstance(group_size, (int, np.integer)) or group_size < 1:
            raise ValueError(f"group_size must be an integer >= 1, got {group_size!r}.")
        k = int(group_size)
        q = float(sampling_prob)
        probs = np.array([math.comb(k, i) * q**i * (1 - q) ** (k - i) for i in range(k + 1)])
        return cls(noise_multiplier, np.arange(k + 1, dtype=np.float64), probs / probs.sum(), adjacency)

    @classmethod
    def fixed_batch_group(
        cls, noise_multiplier, *, dataset_size: int, batch_size: int, group_size: int = 1, adjacency="add_or_remove"
    ):
        """Fixed batch size ``B`` drawn without replacement from ``n`` records, a group of ``g`` (Ganesh 2024, Thm 3.3).

        Each step of DP-SGD that draws a uniformly random batch of exactly ``batch_size`` examples is dominated
        (add and remove adjacency of up to ``group_size`` records, datasets of at least ``dataset_size``
        records) by the mixture with sensitivity ``2 H``, ``H ~ Hypergeometric(B, n + g, g)``:
        ``P(H = j) = C(g, j) C(n, B - j) / C(n + g, B)``, ``j = 0..min(g, B)``.  The factor 2: a group
        member in the batch displaces an example that would have been there, and the two clipped
        gradients can point in opposite directions.  ``group_size=1`` is ordinary example-level DP with a
        fixed batch size -- not the Poisson-subsampled Gaussian at ``q = B / n``, which under-reports it.
        The weights are exact (integer arithmetic, then rounded once).

        Example:
          >>> import jaxdp
          >>> m = jaxdp.MixtureOfGaussians.fixed_batch_group(1.0, dataset_size=999, batch_size=10)
          >>> m.sensitivities.tolist(), [round(p, 6) for p in m.probs.tolist()]
          ([0.0, 2.0], [0.99, 0.01])
        """
        n = _validate.integer("dataset_size", dataset_size)
        b = _validate.integer("batch_size", batch_size)
        g = _validate.integer("group_size", group_size)
        if b > n:
            raise ValueError(f"batch_size must be at most dataset_size ({n}), got {b}.")
        total = math.comb(n + g, b)
        js = range(min(g, b) + 1)
        probs = np.array([float(fractions.Fraction(math.comb(g, j) * math.comb(n, b - j), total)) for j in js])
        return cls(noise_multiplier, 2.0 * np.arange(len(probs), dtype=np.float64), probs / probs.sum(), adjacency)

    def mixture(self):
        c = _f64(self.sensitivities)
        p = _f64(self.probs)
        safe = jnp.where(p > 0, p, 1.0)
        # renormalised: probabilities accepted within 1e-9 of summing to one must not understate P
        log_p = jnp.where(p > 0, jnp.log(safe), -jnp.inf) - jnp.log(jnp.sum(jnp.where(p > 0, p, 0.0)))
        return log_p, c, _f64(self.noise_multiplier)

    def valid(self):
        s = _f64(self.noise_multiplier)
        c = _f64(self.sensitivities)
        p = _f64(self.probs)
        ok = jnp.isfinite(s) & (s > 0)
        ok &= jnp.all(jnp.isfinite(c) & (c >= 0)) & jnp.all(jnp.isfinite(p) & (p >= 0))
        # traced probabilities may have passed through float32 (a user's x64-off trace rounds the mixture's
        # constants, as it rounds any q): they sum to one only to float32 rounding, and mixture() renormalises
        # them (concrete ones are checked to 1e-9 when the mechanism is built)
        return ok & (jnp.abs(jnp.sum(p) - 1.0) < 1e-9 + p.size * 2.0**-23)


@pytree_dataclass(data=("noise_multiplier", "sampling_prob"), static=("adjacency",))
class PoissonSubsampledGaussian(MixtureMechanism):
    """Poisson-subsampled Gaussian mechanism (DP-SGD with Poisson sampling).

    The mixture-of-Gaussians mechanism with ``c = (0, 1)``, ``p = (1 - q, q)``:
    under ``"remove"``, ``P = (1 - q) N(0, s^2) + q N(1, s^2)``, ``Q = N(0, s^2)``.
    ``sampling_prob = 1`` is the plain Gaussian mechanism.

    Example:
      >>> import jaxdp
      >>> m = jaxdp.PoissonSubsampledGaussian(noise_multiplier=1.0, sampling_prob=0.01)
      >>> [d.value for d in m.directions]
      ['remove', 'add']
    """

    noise_multiplier: float
    sampling_prob: float
    adjacency: Adjacency = Adjacency.ADD_OR_REMOVE

    def __post_init__(self):
        _validate.positive("noise_multiplier", self.noise_multiplier)
        _validate.probability("sampling_prob", self.sampling_prob)
        object.__setattr__(self, "adjacency", _adjacency(self.adjacency))

    def mixture(self):
        q = _f64(self.sampling_prob)
        q_lt_1 = q < 1.0
        log_1mq = jnp.where(q_lt_1, jnp.log1p(-jnp.where(q_lt_1, q, 0.0)), -jnp.inf)
        log_p = jnp.stack([log_1mq, jnp.log(q)])
        return log_p, jnp.array([0.0, 1.0]), _f64(self.noise_multiplier)

    def valid(self):
        s = _f64(self.noise_multiplier)
        q = _f64(self.sampling_prob)
        return jnp.isfinite(s) & (s > 0) & jnp.isfinite(q) & (q > 0) & (q <= 1)
