"""Dominating pairs as immutable pytrees.

Every mechanism describes a *dominating pair* ``(P, Q)`` of output
distributions for each adjacency direction, and offers what the accountants
need: the privacy loss ``L(x) = log P(x)/Q(x)``, samplers of the output and of
the privacy-loss random variable under ``P`` or ``Q``, the cumulant generating
function ``K(t) = log E_P[exp(t L)]`` for real or complex ``t`` and the Rényi
divergence ``D_alpha(P || Q) = K(alpha - 1) / (alpha - 1)``.

Conventions (the same as ``dp_accounting``):

* ``"remove"``: the neighbouring dataset is the dataset with one record
  removed. ``P`` is the output distribution on the larger dataset,
  ``P = sum_j p_j N(c_j, sigma^2)`` for a mixture of Gaussians, and
  ``Q = N(0, sigma^2)``.
* ``"add"``: the pair is swapped, ``P = N(0, sigma^2)``, ``Q = sum_j p_j
  N(c_j, sigma^2)``.  Its CGF is ``K_add(t) = K_remove(-1 - t)``.
* ``"add_or_remove"`` (the default): both directions; the accountants report
  the larger delta (equivalently the larger epsilon) of the two.

The Gaussian and Laplace mechanisms are symmetric (both directions give the same
privacy loss distribution), so they are evaluated once.
"""

from __future__ import annotations

import enum
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _validate
from jaxdp._numerics import float64_scope
from jaxdp._pytree import pytree_dataclass
from jaxdp._quadrature import (
    NODES_PER_WINDOW,
    NODES_PER_WINDOW_POSITIVE,
    CheckedMoments,
    checked_moments,
    k0_resolved,
    mixture_rule,
    rule_log_moment,
    rule_tilted_abs_moment,
)

__all__ = [
    "AbstractMechanism",
    "Adjacency",
    "Composition",
    "Gaussian",
    "Laplace",
    "MixtureOfGaussians",
    "PoissonSubsampledGaussian",
    "as_composition",
]


class Adjacency(str, enum.Enum):
    """Neighbouring relation between datasets."""

    REMOVE = "remove"
    ADD = "add"
    ADD_OR_REMOVE = "add_or_remove"


_DIRECTIONS = {
    Adjacency.REMOVE: ("remove",),
    Adjacency.ADD: ("add",),
    Adjacency.ADD_OR_REMOVE: ("remove", "add"),
}


def _adjacency(value) -> Adjacency:
    try:
        return Adjacency(value)
    except ValueError:
        allowed = ", ".join(repr(a.value) for a in Adjacency)
        raise ValueError(f"adjacency must be one of {allowed}, got {value!r}.") from None


def _check_direction(direction):
    if direction not in ("remove", "add"):
        raise ValueError(f"direction must be 'remove' or 'add', got {direction!r}.")


def _check_under(under):
    if under not in ("P", "Q"):
        raise ValueError(f"under must be 'P' or 'Q', got {under!r}.")


def _f64(x):
    return jnp.asarray(x, dtype=jnp.float64)


_FLOAT64_METHODS = (
    "cgf",
    "cgf_upper",
    "checked_moments",
    "max_privacy_loss",
    "gaussian_mu2",
    "tilted_abs_moment",
    "privacy_loss",
    "sample_output",
    "sample_privacy_loss",
    "renyi_divergence",
    "valid",
    "mixture",
)


class AbstractMechanism:
    """Base class of all mechanisms (a dominating pair per direction).

    Every numerical method runs in float64 (see :func:`jaxdp._numerics.float64_scope`),
    whatever the global ``jax_enable_x64`` setting.
    """

    symmetric: ClassVar[bool] = False
    adjacency: Adjacency

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in _FLOAT64_METHODS:
            fn = cls.__dict__.get(name)
            if fn is not None and not getattr(fn, "_float64_scoped", False):
                wrapped = float64_scope(fn)
                wrapped._float64_scoped = True
                setattr(cls, name, wrapped)

    @property
    def directions(self) -> tuple[str, ...]:
        """The directions an accountant must evaluate (the larger delta wins)."""
        if self.symmetric:
            return ("remove",)
        return _DIRECTIONS[self.adjacency]

    # -- to be provided by subclasses -------------------------------------
    def cgf(self, t, direction: str = "remove"):
        """Cumulant generating function ``K(t) = log E_P[exp(t L)]``."""
        raise NotImplementedError

    def privacy_loss(self, x, direction: str = "remove"):
        """Privacy loss ``log P(x) / Q(x)`` at output ``x``."""
        raise NotImplementedError

    def gaussian_mu2(self):
        """``K_remove(1) = log E_Q[(P/Q)^2]`` in closed form.

        For the Gaussian mechanism this is ``mu^2``; for every mechanism it is the
        ``mu^2`` of the Gaussian pair with the same ``K(1)``, which the accountants
        use only to start their root searches.
        """
        return self.cgf(1.0, "remove")

    def tilted_abs_moment(self, t, direction: str = "remove"):
        """``E|L_t - E L_t|^3`` of the privacy loss tilted by ``exp(t L)`` (real ``t``).

        This is the per-step term of the saddle-point error bound.
        """
        raise NotImplementedError

    def sample_output(self, key, shape=(), *, direction: str = "remove", under: str = "P"):
        """Samples of the mechanism output under ``P`` or ``Q``."""
        raise NotImplementedError

    def checked_moments(self, t, direction: str = "remove") -> CheckedMoments:
        """``K, K', K''`` and the tilted third absolute central moment at real ``t``, with a check.

        What the certified saddle-point bound needs.  ``resolved`` is False where
        the values cannot be trusted (non-finite, a non-positive variance, or for
        quadrature-based mechanisms a rule that does not resolve the integrand);
        a certified accountant then returns a vacuous bound.  The default takes
        ``K'`` and ``K''`` by autodiff of :meth:`cgf`.
        """
        t = _f64(t)
        (k0, k1), (_, k2) = jax.jvp(
            lambda s: jax.jvp(lambda u: self.cgf(u, direction), (s,), (jnp.ones_like(s),)), (t,), (jnp.ones_like(t),)
        )
        abs3 = self.tilted_abs_moment(t, direction)
        ok = jnp.isfinite(k0) & jnp.isfinite(k1) & jnp.isfinite(k2) & jnp.isfinite(abs3) & (k2 > 0)
        return CheckedMoments(k0, k1, k2, abs3, jnp.zeros_like(k0), ok)

    def cgf_upper(self, t, direction: str = "remove"):
        """An upper bound on the real ``K(t)`` for certified use: ``+inf`` where it cannot be trusted."""
        k = self.cgf(t, direction)
        return jnp.where(jnp.isnan(k), jnp.inf, k)

    def max_privacy_loss(self, direction: str = "remove"):
        """The largest value of the privacy loss under ``P`` (``+inf`` if unbounded): an ``eps`` with delta 0."""
        return jnp.asarray(jnp.inf, jnp.float64)

    def valid(self):
        """Traced boolean: do the parameters lie in their allowed ranges?"""
        raise NotImplementedError

    # -- shared -----------------------------------------------------------
    @float64_scope
    def sample_privacy_loss(self, key, shape=(), *, direction: str = "remove", under: str = "P"):
        """Samples of the privacy-loss random variable ``L(X)``, ``X ~ P`` or ``Q``."""
        x = self.sample_output(key, shape, direction=direction, under=under)
        return self.privacy_loss(x, direction)

    @float64_scope
    def renyi_divergence(self, alpha, direction: str = "remove"):
        """Rényi divergence ``D_alpha(P || Q)`` of real order ``alpha > 1``."""
        alpha = _f64(alpha)
        return self.cgf(alpha - 1.0, direction) / (alpha - 1.0)


def _concrete_scalar_checks(**checks):
    for name, (kind, value) in checks.items():
        getattr(_validate, kind)(name, value)


@pytree_dataclass(data=("noise_multiplier",), static=("adjacency",))
class Gaussian(AbstractMechanism):
    """Gaussian mechanism with noise standard deviation ``noise_multiplier`` x sensitivity.

    Dominating pair ``P = N(1, s^2)``, ``Q = N(0, s^2)`` with ``s`` the noise
    multiplier; ``L ~ N(mu^2/2, mu^2)`` under ``P`` with ``mu = 1/s``.

    Example:
      >>> import jaxdp
      >>> m = jaxdp.Gaussian(2.0)
      >>> round(float(m.cgf(1.0)), 6)   # t (t + 1) / (2 s^2)
      0.25
    """

    noise_multiplier: float
    adjacency: Adjacency = Adjacency.ADD_OR_REMOVE
    symmetric: ClassVar[bool] = True

    def __post_init__(self):
        _validate.positive("noise_multiplier", self.noise_multiplier)
        object.__setattr__(self, "adjacency", _adjacency(self.adjacency))

    def cgf(self, t, direction="remove"):
        _check_direction(direction)
        s = _f64(self.noise_multiplier)
        return t * (t + 1.0) / (2.0 * s * s)

    def privacy_loss(self, x, direction="remove"):
        _check_direction(direction)
        s = _f64(self.noise_multiplier)
        return (x - 0.5) / (s * s)

    def tilted_abs_moment(self, t, direction="remove"):
        # the tilted loss is N(., 1/s^2): E|N(0, v)|^3 = 2 sqrt(2/pi) v^{3/2}
        _check_direction(direction)
        s = _f64(self.noise_multiplier)
        return 2.0 * math.sqrt(2.0 / math.pi) / (s * s * s) + 0.0 * jnp.asarray(t)

    def checked_moments(self, t, direction="remove"):
        _check_direction(direction)
        s = _f64(self.noise_multiplier)
        t = _f64(t)
        v = 1.0 / (s * s)
        k0, k1 = t * (t + 1.0) * v / 2.0, (t + 0.5) * v
        ok = jnp.isfinite(k0) & jnp.isfinite(k1) & (v > 0) & jnp.isfinite(v)
        return CheckedMoments(k0, k1, v, self.tilted_abs_moment(t, direction), jnp.zeros_like(k0), ok)

    def sample_output(self, key, shape=(), *, direction="remove", under="P"):
        _check_direction(direction)
        _check_under(under)
        s = _f64(self.noise_multiplier)
        z = jax.random.normal(key, shape, dtype=jnp.float64)
        return z * s + (1.0 if under == "P" else 0.0)

    def valid(self):
        s = _f64(self.noise_multiplier)
        return jnp.isfinite(s) & (s > 0)


def _gauss_legendre(n):
    """Gauss-Legendre nodes and weights on [0, 1]."""
    x, w = np.polynomial.legendre.leggauss(n)
    return jnp.asarray(0.5 * (x + 1.0)), jnp.asarray(0.5 * w)


def _one_minus_exp_over(x):
    """``(1 - exp(-x)) / x`` for real or complex ``x``, stable near 0."""
    small = jnp.abs(x) < 1e-3
    xs = jnp.where(small, 1.0, x)
    series = 1.0 - x / 2.0 + x * x / 6.0 - x * x * x / 24.0
    return jnp.where(small, series, -jnp.expm1(-xs) / xs)


@pytree_dataclass(data=("noise_multiplier",), static=("adjacency",))
class Laplace(AbstractMechanism):
    """Laplace mechanism with scale ``noise_multiplier`` x (L1) sensitivity.

    Dominating pair ``P = Lap(1, b)``, ``Q = Lap(0, b)`` with ``b`` the noise
    multiplier; ``L(x) = (|x| - |x - 1|) / b`` takes values in ``[-1/b, 1/b]``.
    ``K(t) = log[(1+t)/(1+2t) e^{t/b} + t/(1+2t) e^{-(1+t)/b}]`` (removable
    singularity at ``t = -1/2``), evaluated stably for real and complex ``t``.

    Example:
      >>> import jaxdp
      >>> m = jaxdp.Laplace(1.0)
      >>> round(float(m.cgf(-1.0)), 12)   # E_P[exp(-L)] = 1
      0.0
    """

    noise_multiplier: float
    adjacency: Adjacency = Adjacency.ADD_OR_REMOVE
    symmetric: ClassVar[bool] = True

    def __post_init__(self):
        _validate.positive("noise_multiplier", self.noise_multiplier)
        object.__setattr__(self, "adjacency", _adjacency(self.adjacency))

    def cgf(self, t, direction="remove"):
        _check_direction(direction)
        b = _f64(self.noise_multiplier)
        t = jnp.asarray(t)
        # K(t) = K(-1 - t): move to Re(1 + 2t) >= 0 where exp(-(1+2t)/b) <= 1.
        t = jnp.where(jnp.real(t) < -0.5, -1.0 - t, t)
        x = (1.0 + 2.0 * t) / b
        inner = 0.5 * (1.0 + jnp.exp(-x)) + _one_minus_exp_over(x) / (2.0 * b)
        return t / b + jnp.log(inner)

    def privacy_loss(self, x, direction="remove"):
        _check_direction(direction)
        b = _f64(self.noise_multiplier)
        return (jnp.abs(x) - jnp.abs(x - 1.0)) / b

    def tilted_abs_moment(self, t, direction="remove"):
        # Tilted law of L: atoms at -1/b (weight e^{-(1+t)/b}/2) and +1/b (e^{t/b}/2),
        # density e^{-1/(2b)} e^{(1+2t) l / 2} / 4 on (-1/b, 1/b).  Gauss-Legendre on
        # both sides of the mean (the integrand |l - m|^3 has a kink there).
        _check_direction(direction)
        b = _f64(self.noise_multiplier)
        t = jnp.asarray(t)
        x, w = _gauss_legendre(64)

        def pieces(lo, hi):
            ell = lo + (hi - lo) * x
            log_wt = jnp.log((hi - lo) * w) + math.log(0.25) - 0.5 / b + 0.5 * (1.0 + 2.0 * t) * ell
            return ell, log_wt

        atoms = jnp.stack([-1.0 / b, 1.0 / b])
        log_atoms = jnp.stack([math.log(0.5) - (1.0 + t) / b, math.log(0.5) + t / b])
        ell_c, log_c = pieces(-1.0 / b, 1.0 / b)
        ell = jnp.concatenate([atoms, ell_c])
        pi = jax.nn.softmax(jnp.concatenate([log_atoms, log_c]))
        mean = jnp.clip(jnp.sum(pi * ell), -1.0 / b, 1.0 / b)
        ell_l, log_l = pieces(-1.0 / b, mean)
        ell_r, log_r = pieces(mean, 1.0 / b)
        ell = jnp.concatenate([atoms, ell_l, ell_r])
        pi = jax.nn.softmax(jnp.concatenate([log_atoms, log_l, log_r]))
        return jnp.sum(pi * jnp.abs(ell - mean) ** 3)

    def max_privacy_loss(self, direction="remove"):
        _check_direction(direction)
        return 1.0 / _f64(self.noise_multiplier)

    def sample_output(self, key, shape=(), *, direction="remove", under="P"):
        _check_direction(direction)
        _check_under(under)
        b = _f64(self.noise_multiplier)
        z = jax.random.laplace(key, shape, dtype=jnp.float64)
        return z * b + (1.0 if under == "P" else 0.0)

    def valid(self):
        b = _f64(self.noise_multiplier)
        return jnp.isfinite(b) & (b > 0)


class _MixtureBase(AbstractMechanism):
    """Shared maths of mixture-of-Gaussians pairs; subclasses give the mixture."""

    def mixture(self):
        """Returns ``(log_p, c, sigma)`` as float64 arrays."""
        raise NotImplementedError

    def _rule(self, lam, direction):
        # remove: lam = 1 + t, positive for t > -1 (every accountant uses t > 0), where
        # the integrand's features are at least unit-wide and fewer nodes suffice.
        log_p, c, s = self.mixture()
        nodes = NODES_PER_WINDOW_POSITIVE if direction == "remove" else NODES_PER_WINDOW
        return mixture_rule(jnp.real(lam), log_p, c / s, nodes_per_window=nodes)

    def cgf(self, t, direction="remove"):
        _check_direction(direction)
        lam = 1.0 + jnp.asarray(t) if direction == "remove" else -jnp.asarray(t)
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
        lam, sign = (1.0 + t, 1.0) if direction == "remove" else (-t, -1.0)
        return rule_tilted_abs_moment(lam, sign, self._rule(lam, direction))

    def checked_moments(self, t, direction="remove"):
        _check_direction(direction)
        t = _f64(t)
        lam, sign = (1.0 + t, 1.0) if direction == "remove" else (-t, -1.0)
        log_p, c, s = self.mixture()
        nodes = NODES_PER_WINDOW_POSITIVE if direction == "remove" else NODES_PER_WINDOW
        return checked_moments(lam, sign, log_p, c / s, nodes_per_window=nodes)

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
        if direction == "remove":  # log R grows without bound unless every present sensitivity is 0
            return jnp.where(jnp.any(present & (c > 0)), jnp.inf, 0.0)
        # add: L = -log R and R >= p_0 (the mass of the zero-sensitivity components)
        log_p0 = jax.nn.logsumexp(jnp.where(c == 0, log_p, -jnp.inf))
        return -log_p0

    def _log_ratio(self, x):
        log_p, c, s = self.mixture()
        x = jnp.asarray(x)
        e = log_p + (c * x[..., None] - 0.5 * c * c) / (s * s)
        return jax.nn.logsumexp(e, axis=-1)

    def privacy_loss(self, x, direction="remove"):
        _check_direction(direction)
        lr = self._log_ratio(x)
        return lr if direction == "remove" else -lr

    def sample_output(self, key, shape=(), *, direction="remove", under="P"):
        _check_direction(direction)
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


@pytree_dataclass(data=("noise_multiplier", "sensitivities", "probs"), static=("adjacency",))
class MixtureOfGaussians(_MixtureBase):
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
        return ok & (jnp.abs(jnp.sum(p) - 1.0) < 1e-9)


@pytree_dataclass(data=("noise_multiplier", "sampling_prob"), static=("adjacency",))
class PoissonSubsampledGaussian(_MixtureBase):
    """Poisson-subsampled Gaussian mechanism (DP-SGD with Poisson sampling).

    The mixture-of-Gaussians mechanism with ``c = (0, 1)``, ``p = (1 - q, q)``:
    under ``"remove"``, ``P = (1 - q) N(0, s^2) + q N(1, s^2)``, ``Q = N(0, s^2)``.
    ``sampling_prob = 1`` is the plain Gaussian mechanism.

    Example:
      >>> import jaxdp
      >>> m = jaxdp.PoissonSubsampledGaussian(noise_multiplier=1.0, sampling_prob=0.01)
      >>> m.directions
      ('remove', 'add')
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


@pytree_dataclass(data=("mechanisms", "counts"))
class Composition(AbstractMechanism):
    """Heterogeneous composition: ``mechanisms[i]`` applied ``counts[i]`` times.

    Accepted wherever a single mechanism is; the ``num_steps`` argument of the
    accountants then repeats the whole composition.  All non-symmetric parts
    must share one adjacency relation (the neighbouring relation is a property
    of the datasets, not of a step).

    Example:
      >>> import jaxdp
      >>> c = jaxdp.Composition.of((jaxdp.Gaussian(1.0), 10), (jaxdp.Gaussian(2.0), 5))
      >>> round(float(c.cgf(1.0)), 6)      # 10 * 1 + 5 * 0.25
      11.25
    """

    mechanisms: tuple
    counts: tuple

    def __post_init__(self):
        mechs = tuple(self.mechanisms)
        counts = tuple(self.counts)
        if len(mechs) == 0 or len(mechs) != len(counts):
            raise ValueError("Composition needs one count per mechanism and at least one mechanism.")
        for m in mechs:
            if not isinstance(m, AbstractMechanism) or isinstance(m, Composition):
                raise ValueError(f"Composition parts must be (non-composition) mechanisms, got {m!r}.")
        for n in counts:
            _validate.num_steps("counts", n)
        object.__setattr__(self, "mechanisms", mechs)
        object.__setattr__(self, "counts", counts)
        self.adjacency  # noqa: B018 -- validates that the parts agree

    @classmethod
    def of(cls, *parts):
        """``Composition.of((mechanism, count), ...)``."""
        return cls(tuple(m for m, _ in parts), tuple(n for _, n in parts))

    @property
    def symmetric(self):  # type: ignore[override]
        return all(m.symmetric for m in self.mechanisms)

    @property
    def adjacency(self):  # type: ignore[override]
        adj = {m.adjacency for m in self.mechanisms if not m.symmetric}
        if len(adj) > 1:
            raise ValueError(
                "all non-symmetric parts of a Composition must use the same adjacency, "
                f"got {sorted(a.value for a in adj)}."
            )
        return adj.pop() if adj else Adjacency.ADD_OR_REMOVE

    def scaled(self, factor):
        """The composition repeated ``factor`` times."""
        return _unchecked_composition(self.mechanisms, tuple(n * factor for n in self.counts))

    def _count_weighted(self, per_mechanism):
        """``sum_i counts[i] * per_mechanism(mechanisms[i])`` (composition adds CGFs)."""
        total = 0.0
        for m, n in zip(self.mechanisms, self.counts):
            total = total + _f64(n) * per_mechanism(m)
        return total

    def cgf(self, t, direction="remove"):
        _check_direction(direction)
        return self._count_weighted(lambda m: m.cgf(t, direction))

    def gaussian_mu2(self):
        return self._count_weighted(lambda m: m.gaussian_mu2())

    def tilted_abs_moment(self, t, direction="remove"):
        """Sum over steps of the per-step tilted third absolute central moments."""
        _check_direction(direction)
        return self._count_weighted(lambda m: m.tilted_abs_moment(t, direction))

    def checked_moments(self, t, direction="remove"):
        """Count-weighted sums of the parts' :meth:`AbstractMechanism.checked_moments` (all must be resolved)."""
        _check_direction(direction)
        parts = [(m.checked_moments(t, direction), _f64(n)) for m, n in zip(self.mechanisms, self.counts)]
        fields = [sum(n * getattr(p, f) for p, n in parts) for f in ("k0", "k1", "k2", "abs3", "k0_error")]
        ok = jnp.array(True)
        for p, _ in parts:
            ok &= p.resolved
        return CheckedMoments(*fields, ok & jnp.isfinite(fields[0]) & jnp.isfinite(fields[2]))

    def cgf_upper(self, t, direction="remove"):
        _check_direction(direction)
        return self._count_weighted(lambda m: m.cgf_upper(t, direction))

    def max_privacy_loss(self, direction="remove"):
        _check_direction(direction)
        return self._count_weighted(lambda m: m.max_privacy_loss(direction))

    @property
    def identical_steps(self) -> bool:
        """True when every step is the same mechanism (one part): the i.i.d. Berry-Esseen constant applies."""
        return len(self.mechanisms) == 1

    def privacy_loss(self, x, direction="remove"):
        """Privacy loss of a tuple ``x`` of per-part outputs, each of shape ``(count, ...)``."""
        return sum(jnp.sum(m.privacy_loss(xi, direction), axis=0) for m, xi in zip(self.mechanisms, x))

    def sample_output(self, key, shape=(), *, direction="remove", under="P"):
        """Per-part outputs; part ``i`` has shape ``(counts[i],) + shape`` (counts must be concrete)."""
        keys = jax.random.split(key, len(self.mechanisms))
        return tuple(
            m.sample_output(k, (int(n), *tuple(shape)), direction=direction, under=under)
            for m, n, k in zip(self.mechanisms, self.counts, keys)
        )

    def valid(self):
        ok = jnp.array(True)
        for m, n in zip(self.mechanisms, self.counts):
            n = _f64(n)
            ok &= m.valid() & jnp.isfinite(n) & (n >= 1)
        return ok


def _unchecked_composition(mechanisms, counts):
    obj = object.__new__(Composition)
    object.__setattr__(obj, "mechanisms", tuple(mechanisms))
    object.__setattr__(obj, "counts", tuple(counts))
    return obj


def as_composition(mechanism, num_steps) -> Composition:
    """Normalises ``(mechanism, num_steps)`` to a :class:`Composition`."""
    if isinstance(mechanism, Composition):
        return mechanism.scaled(num_steps)
    if not isinstance(mechanism, AbstractMechanism):
        raise ValueError(f"mechanism must be a jaxdp mechanism, got {type(mechanism).__name__}.")
    return _unchecked_composition((mechanism,), (num_steps,))
