"""One step's output law under ``P`` with its privacy loss: what a sampler needs of a mechanism.

A mechanism's :meth:`~jaxdp.mechanisms.AbstractMechanism.output_law` returns one of two laws, so that a sampler
reads the pair from the mechanism, the one place kept in step with its ``cgf`` and ``privacy_loss``:

* :class:`GaussianMixtureLaw`: ``P = sum_j p_j N(c_j, s^2)`` (the Gaussian mechanism, mixtures of Gaussians,
  the Poisson-subsampled Gaussian; under ``"add"`` ``P`` is ``N(0, s^2)`` and the mixture sits in ``Q``).  The
  loss is ``sign * log R(x)`` with ``R(x) = sum_k r_k exp((rc_k x - rc_k^2 / 2) / s^2)`` (fields ``log_r``,
  ``rc``).  Its exponential tilt
  ``P_theta(x) ~ e^{theta x} P(x)`` is again such a mixture: means ``c_j + theta s^2``, weights
  ``p_j e^{theta c_j}``, ``log M(theta) = logsumexp(log p_j + theta c_j) + theta^2 s^2 / 2``.
* :class:`LaplaceLaw`: ``P = Lap(1, b)``, loss ``(|x| - |x - 1|) / b``; its tilt (``|theta| < 1/b``) puts ``x``
  right of 1 with probability ``(1 + b theta) / 2`` at an ``Exp(1/b - theta)`` distance and left of it at an
  ``Exp(1/b + theta)`` distance; ``log M(theta) = theta - log(1 - b^2 theta^2)``.

Both are pytrees (their parameters are leaves, so derivatives flow through them) with the same methods.
"""

from __future__ import annotations

import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.numerics import float64_scope, logsumexp, pytree_dataclass

# Gauss-Hermite rule for E[f(m + s Z)] (the tilted mean of the loss; the loss is smooth)
_GH_X, _GH_W = np.polynomial.hermite.hermgauss(80)
_GH_X = _GH_X * math.sqrt(2.0)
_GH_W = _GH_W / math.sqrt(math.pi)


def gauss_mixture_log_density(log_w, mu, s, x):
    """``log sum_j w_j N(x; mu_j, s^2)`` (``log_w`` normalised); one or two components without a reduction,
    since these run once per sampled step."""
    x = jnp.asarray(x)
    const = -jnp.log(s) - 0.5 * math.log(2.0 * math.pi)
    j = mu.shape[0]
    if j == 1:
        return log_w[0] - 0.5 * ((x - mu[0]) / s) ** 2 + const
    if j == 2:
        return jnp.logaddexp(log_w[0] - 0.5 * ((x - mu[0]) / s) ** 2, log_w[1] - 0.5 * ((x - mu[1]) / s) ** 2) + const
    return logsumexp(log_w - 0.5 * ((x[..., None] - mu) / s) ** 2, axis=-1) + const


def _float64_methods(cls):
    # as the mechanisms' methods: float64 whatever the user's jax_enable_x64 (a law is public, called directly)
    for name, fn in list(vars(cls).items()):
        if name.startswith("_"):
            continue
        if inspect.isfunction(fn):
            setattr(cls, name, float64_scope(fn))
        elif isinstance(fn, classmethod):
            setattr(cls, name, classmethod(float64_scope(fn.__func__)))
    return cls


@_float64_methods
@pytree_dataclass(data=("log_p", "c", "log_r", "rc", "s"), static=("sign",))
class GaussianMixtureLaw:
    """``P = sum_j p_j N(c_j, s^2)`` and the loss ``sign * log sum_k r_k exp((c_k x - c_k^2 / 2) / s^2)``.

    Example:
      >>> import jaxdp
      >>> law = jaxdp.Gaussian(2.0).output_law("remove")   # P = N(1, 4), loss (x - 1/2) / 4
      >>> round(float(law.loss(1.5)), 6), round(float(law.log_mgf(0.5)), 6)   # theta + theta^2 s^2 / 2
      (0.25, 1.0)
    """

    log_p: jax.Array  # (J,) log weights of P's components
    c: jax.Array  # (J,) their means
    log_r: jax.Array  # (K,) log weights of R's components
    rc: jax.Array  # (K,) their sensitivities
    s: jax.Array  # noise scale
    sign: float  # +1 remove, -1 add

    @classmethod
    def of_mixture(cls, log_p, c, s, direction: str):
        """The law of the pair ``(sum_j p_j N(c_j, s^2), N(0, s^2))`` under ``direction``."""
        log_p, c, s = (jnp.asarray(v, jnp.float64) for v in (log_p, c, s))
        if direction == "remove":
            return cls(log_p, c, log_p, c, s, 1.0)
        return cls(jnp.zeros(1), jnp.zeros(1), log_p, c, s, -1.0)

    def loss(self, x):
        """The privacy loss at output ``x``."""
        x = jnp.asarray(x)
        s2 = self.s * self.s
        k = self.rc.shape[0]
        # one or two components (Gaussian, subsampled Gaussian) without a reduction: this runs per sampled step
        if k == 1:
            log_r = self.log_r[0] + (self.rc[0] * x - 0.5 * self.rc[0] ** 2) / s2
        elif k == 2:
            a = self.log_r[0] + (self.rc[0] * x - 0.5 * self.rc[0] ** 2) / s2
            b = self.log_r[1] + (self.rc[1] * x - 0.5 * self.rc[1] ** 2) / s2
            log_r = jnp.logaddexp(a, b)
        else:
            terms = self.log_r + (self.rc * x[..., None] - 0.5 * self.rc**2) / s2
            log_r = logsumexp(terms, axis=-1)
        return self.sign * log_r

    def log_density(self, x):
        """``log P(x)``."""
        return gauss_mixture_log_density(jax.nn.log_softmax(self.log_p), self.c, self.s, x)

    def loss_and_log_density(self, x):
        """``(loss(x), log_density(x))`` sharing one evaluation of ``log R(x)``: under ``"remove"``
        ``P(x) = N(x; 0, s^2) R(x) / sum_j p_j`` (``P``'s components are ``R``'s), under ``"add"`` ``P = N(0, s^2)``,
        so a sampled step pays for one log-sum-exp instead of two."""
        ell = self.loss(x)
        log_phi = -0.5 * (x / self.s) ** 2 - jnp.log(self.s) - 0.5 * math.log(2.0 * math.pi)
        if self.sign > 0:
            return ell, log_phi + ell - logsumexp(self.log_p)
        return ell, log_phi

    def log_mgf(self, theta):
        """``log E_P[e^{theta x}]``."""
        return logsumexp(self.log_p + theta * self.c) + 0.5 * theta * theta * self.s * self.s

    def theta_range(self):
        """A safe part of the tilts ``theta`` at which a sampler's weights stay representable."""
        big = 60.0 / (self.s * self.s) + 60.0 / self.s
        return -big, big

    def tilted_mean_loss(self, theta):
        """``E[L]`` under the tilted law ``P_theta``."""
        w = jax.nn.softmax(self.log_p + theta * self.c)
        means = self.c + theta * self.s * self.s
        x = means[:, None] + self.s * _GH_X[None, :]
        return jnp.sum(w[:, None] * _GH_W[None, :] * self.loss(x))

    def _cmax(self):
        return jnp.max(jnp.abs(jnp.concatenate([self.c, self.rc])))

    def loss_tilt_window(self, t):
        """An interval of outputs holding the loss tilt ``P_t(x) ~ P(x) e^{t L(x)}`` (``t >= 0``)."""
        cmax = self._cmax()
        return -(1.0 + t) * cmax - 16.0 * self.s, (1.0 + t) * cmax + 16.0 * self.s

    def guide_window(self):
        """An interval of outputs wide enough for a Riemann sum of one step's ``delta(eps)`` at any ``eps``."""
        cmax = self._cmax()
        return -cmax - 40.0 * self.s, 2.0 * cmax + 40.0 * self.s


@_float64_methods
@pytree_dataclass(data=("b",))
class LaplaceLaw:
    """``P = Lap(1, b)`` and the loss ``(|x| - |x - 1|) / b``.

    Example:
      >>> import jaxdp
      >>> law = jaxdp.Laplace(0.5).output_law()
      >>> float(law.loss(3.0)), float(law.loss(-3.0))   # the loss is bounded by 1/b
      (2.0, -2.0)
    """

    b: jax.Array

    def loss(self, x):
        """The privacy loss at output ``x``."""
        return (jnp.abs(x) - jnp.abs(x - 1.0)) / self.b

    def log_density(self, x):
        """``log P(x)``."""
        return -jnp.abs(x - 1.0) / self.b - jnp.log(2.0 * self.b)

    def loss_and_log_density(self, x):
        """``(loss(x), log_density(x))``."""
        return self.loss(x), self.log_density(x)

    def log_mgf(self, theta):
        """``log E_P[e^{theta x}]`` (``|theta| < 1/b``)."""
        bt = self.b * theta
        return theta - jnp.log1p(-bt * bt)

    def theta_range(self):
        """A safe part of the tilts with a finite moment generating function."""
        return -0.95 / self.b, 0.95 / self.b

    def tilted_mean_loss(self, theta):
        """``E[L]`` under the tilted law ``P_theta`` (closed form)."""
        b = self.b
        p_right = 0.5 * (1.0 + b * theta)
        r = 1.0 / b + theta
        em = jnp.exp(-r)
        left = ((1.0 - em) - 2.0 * (1.0 - em * (1.0 + r)) / r - em) / b
        return p_right / b + (1.0 - p_right) * left

    def loss_tilt_window(self, t):
        """An interval of outputs holding the loss tilt ``P_t(x) ~ P(x) e^{t L(x)}``."""
        del t  # the loss is bounded: the tilt keeps P's exponential tails
        return 1.0 - 45.0 * self.b, 1.0 + 45.0 * self.b

    def guide_window(self):
        """An interval of outputs wide enough for a Riemann sum of one step's ``delta(eps)`` at any ``eps``."""
        return 1.0 - 60.0 * self.b, 1.0 + 60.0 * self.b
