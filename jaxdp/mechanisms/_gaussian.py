"""The Gaussian mechanism."""

from __future__ import annotations

import math
from typing import ClassVar

import jax
import jax.numpy as jnp

from jaxdp.mechanisms._base import (
    AbstractMechanism,
    Adjacency,
    _adjacency,
    _check_direction,
    _check_static_direction,
    _check_under,
    _f64,
)
from jaxdp.mechanisms._laws import GaussianMixtureLaw
from jaxdp.mechanisms._quadrature import (
    CheckedMoments,
)
from jaxdp.numerics import pytree_dataclass
from jaxdp.numerics import validate as _validate


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
    direction_as_data: ClassVar[bool] = True

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

    def output_law(self, direction="remove"):
        # under "add" the true add pair (P = N(0, s^2)), not the remove pair privacy_loss answers with: the exact
        # tilt (montecarlo._exact_tilt) samples a Gaussian step under add in these coordinates
        _check_static_direction(direction)
        s = _f64(self.noise_multiplier)
        return GaussianMixtureLaw.of_mixture(jnp.zeros(1), jnp.ones(1), s, direction)

    def sample_output(self, key, shape=(), *, direction="remove", under="P"):
        _check_direction(direction)
        _check_under(under)
        s = _f64(self.noise_multiplier)
        z = jax.random.normal(key, shape, dtype=jnp.float64)
        return z * s + (1.0 if under == "P" else 0.0)

    def valid(self):
        s = _f64(self.noise_multiplier)
        return jnp.isfinite(s) & (s > 0)
