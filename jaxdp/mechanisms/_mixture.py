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
    _check_static_direction,
    _check_under,
    _f64,
    by_direction,
    is_static_direction,
)
from jaxdp.mechanisms._laws import GaussianMixtureLaw
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
from jaxdp.numerics import log1p, pytree_dataclass
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

    def cgf_derivatives(self, t, direction="remove"):
        # K from the rule; K' and K'' the mean and variance of the loss under the tilted weights R^lam w on the
        # same nodes: what forward-mode differentiation of ``cgf`` gives (the nodes are held fixed there too),
        # from one traced rule instead of three nested copies (a subclass with a ``cgf`` of its own: its derivatives)
        if type(self).cgf is not MixtureMechanism.cgf:
            return super().cgf_derivatives(t, direction)
        _check_direction(direction)
        t = jnp.asarray(t)
        lam, sign = by_direction(direction, (1.0 + t, 1.0), (-t, -1.0))
        rule = self._rule(lam, direction)
        pi = jax.nn.softmax(lam * rule.log_r + rule.log_w)
        ell = sign * rule.log_r
        k1 = jnp.sum(pi * ell)
        k2 = jnp.sum(pi * (ell - k1) ** 2)
        return rule_log_moment(lam, rule), k1, k2

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

    def output_law(self, direction="remove"):
        _check_static_direction(direction)
        return GaussianMixtureLaw.of_mixture(*self.mixture(), direction)

    def sample_output(self, key, shape=(), *, direction="remove", under="P"):
        _check_static_direction(direction, "sample_output")
        _check_under(under)
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


#: the unit roundoff of float64
_U = 2.0**-53


def _log_binomial_terms(k, j):
    """``log C(k, j)`` as ``(multiplier, log(integer))`` terms: ``sum_{i<j} log(k - i) - log(i + 1)``."""
    return [(1, math.log(k - i)) for i in range(j)] + [(-1, math.log(i + 1)) for i in range(j)]


def _log_hypergeometric_terms(population, g, b, j):
    """``log P(H = j)``, ``H ~ Hypergeometric(b draws, population, g marked)``, as ``(multiplier, log)`` terms;
    ``None`` where the weight is exactly 0 (more unmarked draws than unmarked records).

    ``C(g, j) C(M - g, b - j) / C(M, b) = C(g, j) [b! / (b - j)!] [(M - b)! / (M - b - g + j)!] [(M - g)! / M!]``
    with ``M`` the population: ``2 (g + j)`` logarithms of integers in ``[1, M]``, however large ``M`` and ``b``.
    """
    m = population
    if b - j > m - g:
        return None
    terms = _log_binomial_terms(g, j)
    terms += [(1, math.log(b - i)) for i in range(j)]
    terms += [(1, math.log(m - b - i)) for i in range(g - j)]
    terms += [(-1, math.log(m - i)) for i in range(g)]
    return terms


def dominating_weights(log_terms) -> np.ndarray:
    """Probabilities ``p~_0..p~_J`` that stochastically dominate the exact law, from its log-weights.

    ``log_terms[j]`` is a list of ``(multiplier, value)`` pairs whose sum ``sum m v`` is ``log p_j`` (each
    ``value`` a logarithm from the C library, within 2 ulp), or ``None`` for ``p_j = 0``.  Above the lowest
    present weight, ``p~_j >= p_j``: the sum is taken exactly rounded (``math.fsum``) and raised by a bound on
    every rounding in it (each ``m v`` within ``5 u |m v|``, the sum within ``u |s|``, ``u = 2^-53``, doubled
    for margin), ``exp`` of it nudged up by ``16 u`` relative (and to the smallest positive double where it
    underflows).  The lowest present weight is the rest, ``1 - sum p~_j`` in exact rational arithmetic,
    rounded down.  So every tail ``P(c >= j)`` above the lowest present weight is at least the exact one and
    the weights sum to at most 1: a mixture-of-Gaussians pair with these weights dominates the exact one
    (Ganesh 2024, Lemma 2.9; ``MixtureOfGaussians.mixture`` divides by their sum, which only raises the tails
    further).  The excess is ~1e-13 relative for groups of tens (1e-10 on the lowest weight, which takes it).

    Example:
      >>> import math
      >>> p = dominating_weights([[(1, math.log(0.75))], [(1, math.log(0.25))]])
      >>> bool(p[1] > 0.25), bool(p[1] < 0.25 * (1 + 1e-14)), bool(p.sum() <= 1.0)
      (True, True, True)
    """
    present = [j for j, t in enumerate(log_terms) if t is not None]
    if not present:
        raise ValueError("a law needs at least one weight that is not zero.")
    low = present[0]
    out = np.zeros(len(log_terms))
    for j in present[1:]:
        products = [m * v for m, v in log_terms[j]]
        s = math.fsum(products)
        err = 2.0 * (5.0 * _U * math.fsum(abs(x) for x in products) + _U * abs(s))
        w = math.exp(s + err) * (1.0 + 16.0 * _U)
        out[j] = max(math.nextafter(w, math.inf), 5e-324)
    # the lowest present weight takes the rest, in exact rational arithmetic, rounded down
    rest = 1 - sum(fractions.Fraction(float(w)) for w in out[low + 1 :])
    w = float(rest)
    out[low] = max(math.nextafter(w, 0.0) if fractions.Fraction(w) > rest else w, 0.0)
    return out


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
        """Group of ``group_size`` records under Poisson sampling (Ganesh 2024, Thm 3.1).

        Sensitivity ``c ~ Binomial(group_size, q)``.  The weights are computed in log space and rounded so that
        the law stochastically dominates the exact binomial (every tail ``P(c >= j)``, ``j >= 1``, rounded up:
        see :func:`dominating_weights`), which keeps the pair a dominating pair (Ganesh 2024, Lemma 2.9).

        Example:
          >>> import jaxdp
          >>> m = jaxdp.MixtureOfGaussians.poisson_group(1.0, 0.5, 2)
          >>> m.sensitivities.tolist(), [round(p, 12) for p in m.probs.tolist()]
          ([0.0, 1.0, 2.0], [0.25, 0.5, 0.25])
        """
        _validate.probability("sampling_prob", sampling_prob)
        if not isinstance(group_size, (int, np.integer)) or isinstance(group_size, bool) or group_size < 1:
            raise ValueError(f"group_size must be an integer >= 1, got {group_size!r}.")
        k = int(group_size)
        q = float(sampling_prob)
        if q == 1.0:  # every record of the group is in every batch
            probs = np.zeros(k + 1)
            probs[k] = 1.0
            return cls(noise_multiplier, np.arange(k + 1, dtype=np.float64), probs, adjacency)
        log_q, log_1mq = math.log(q), math.log1p(-q)
        terms = [[*_log_binomial_terms(k, i), (i, log_q), (k - i, log_1mq)] for i in range(k + 1)]
        return cls(noise_multiplier, np.arange(k + 1, dtype=np.float64), dominating_weights(terms), adjacency)

    @classmethod
    def fixed_batch_group(
        cls, noise_multiplier, *, dataset_size: int, batch_size: int, group_size: int = 1, adjacency="add_or_remove"
    ):
        """Fixed batches of ``B`` drawn without replacement from a training set of ``N`` records, a group of ``g``.

        ``dataset_size`` is ``N``, the number of records the training run samples its batches from (what
        :func:`~jaxdp.training.fixed_batch_sample` takes as ``num_examples`` and
        :meth:`~jaxdp.training.PrivacyTracker.record` as ``dataset_size``).  Ganesh 2024, Thm 3.3, states the
        bound for neighbouring datasets whose smaller one has at least ``n`` records, with sensitivity ``2 H``,
        ``H ~ Hypergeometric(B, n + g, g)``: ``P(H = j) = C(g, j) C(n, B - j) / C(n + g, B)``.  The smaller
        dataset has ``n = N - g`` records under ``"remove"`` (the group is removed from the training set; then
        ``H`` is the number of group members in a batch drawn from the ``N`` records) and ``n = N`` under
        ``"add"``; ``"add_or_remove"`` takes ``n = N - g``, which is valid for both directions (Thm 3.3 holds
        for every dataset of at least ``n`` records).  The factor 2: a group member in the batch displaces an
        example that would have been there, and the two clipped gradients can point in opposite directions.
        ``group_size=1`` is ordinary example-level DP with a fixed batch size -- not the Poisson-subsampled
        Gaussian at ``q = B / N``, which under-reports it.

        The weights are computed in log space (O(g^2) work, whatever ``N`` and ``B``) and rounded so that the
        law stochastically dominates the exact hypergeometric (:func:`dominating_weights`), which keeps the
        pair a dominating pair (Ganesh 2024, Lemma 2.9).

        Example:
          >>> import jaxdp
          >>> m = jaxdp.MixtureOfGaussians.fixed_batch_group(1.0, dataset_size=1000, batch_size=10)
          >>> m.sensitivities.tolist(), [round(p, 6) for p in m.probs.tolist()]   # 10 of the 1000 records
          ([0.0, 2.0], [0.99, 0.01])
        """
        big_n = _validate.integer("dataset_size", dataset_size)
        b = _validate.integer("batch_size", batch_size)
        g = _validate.integer("group_size", group_size)
        if b > big_n:
            raise ValueError(f"batch_size must be at most dataset_size ({big_n}), got {b}.")
        adjacency = _adjacency(adjacency)
        # the smaller neighbouring dataset (at least 0 records: a group larger than the training set is a
        # group of at most g records, which Thm 3.3 covers too)
        n = big_n if adjacency == Adjacency.ADD else max(big_n - g, 0)
        js = range(min(g, b) + 1)
        terms = [_log_hypergeometric_terms(n + g, g, b, j) for j in js]
        probs = dominating_weights(terms)
        return cls(noise_multiplier, 2.0 * np.arange(len(probs), dtype=np.float64), probs, adjacency)

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
        log_1mq = jnp.where(q_lt_1, log1p(-jnp.where(q_lt_1, q, 0.0)), -jnp.inf)
        log_p = jnp.stack([log_1mq, jnp.log(q)])
        return log_p, jnp.array([0.0, 1.0]), _f64(self.noise_multiplier)

    def valid(self):
        s = _f64(self.noise_multiplier)
        q = _f64(self.sampling_prob)
        return jnp.isfinite(s) & (s > 0) & jnp.isfinite(q) & (q > 0) & (q <= 1)
