"""The Laplace mechanism."""

from __future__ import annotations

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
)
from jaxdp.mechanisms._laws import LaplaceLaw
from jaxdp.numerics import pytree_dataclass
from jaxdp.numerics import validate as _validate


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
    direction_as_data: ClassVar[bool] = True

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

    def output_law(self, direction="remove"):
        _check_static_direction(direction)
        return LaplaceLaw(_f64(self.noise_multiplier))

    def sample_output(self, key, shape=(), *, direction="remove", under="P"):
        _check_direction(direction)
        _check_under(under)
        b = _f64(self.noise_multiplier)
        z = jax.random.laplace(key, shape, dtype=jnp.float64)
        return z * b + (1.0 if under == "P" else 0.0)

    def valid(self):
        b = _f64(self.noise_multiplier)
        return jnp.isfinite(b) & (b > 0)
