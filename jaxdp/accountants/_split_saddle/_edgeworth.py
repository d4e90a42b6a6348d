"""Closed-form expectations under a first-order Edgeworth density (Gaussian plus skewness) of given cumulants:
the Mills ratio with a Hermite recurrence, Gauss-Laguerre where the recurrence would cancel."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from jaxdp.numerics import (
    log_ndtr,
    log_sub_exp,
)

#: the Edgeworth factor is kept above this (its first-order form can turn negative far in a tail)
MIN_FACTOR = 0.05
#: above this Mills-ratio argument the Hermite recurrence cancels: Gauss-Laguerre instead
_LAGUERRE_FROM = 8.0
_GL_X, _GL_W = np.polynomial.laguerre.laggauss(24)


_HERMITE = (
    lambda z: 1.0,
    lambda z: z,
    lambda z: z * z - 1.0,
    lambda z: z**3 - 3.0 * z,
    lambda z: z**4 - 6.0 * z * z + 3.0,
    lambda z: z**5 - 10.0 * z**3 + 15.0 * z,
)


def _hermite(k, z):
    """``He_k(z)`` (only the one asked for is traced)."""
    return _HERMITE[k](z)


def _log_j0(u):
    """``log J_0(u) = log int_0^inf e^{-u y - y^2/2} dy`` (``= log(sqrt(2 pi) e^{u^2/2} Phi(-u))``).

    Below ``_LAGUERRE_FROM`` from ``log Phi``; above, by 24-point Gauss-Laguerre in ``x = u y`` (within 7e-16
    of mpmath for every ``u >= 8``).  ``log Phi(-u) + u^2/2`` cancels: its error grows as ``u^2`` (3e-11 at
    ``u = 1e3``, 1e-4 at ``u = 1e6``), and the difference ``log J_0(u) - log J_0(u + s)`` of two nearby
    arguments (the Gaussian part of :func:`_log_terms`) would drown in it, with the wrong sign and a NaN term
    at the huge ``z0`` of large tilts at a small ``q``."""
    big = u >= _LAGUERRE_FROM
    small = log_ndtr(-jnp.where(big, 0.0, u)) + 0.5 * u * u + 0.5 * math.log(2.0 * math.pi)
    uu = jnp.maximum(u, _LAGUERRE_FROM)
    y = _GL_X / uu[..., None]
    laguerre = jnp.log(jnp.sum(_GL_W * jnp.exp(-0.5 * y * y), axis=-1)) - jnp.log(uu)
    return jnp.where(big, laguerre, small)


def _ratios(z0, a):
    """``(log J_0, [J_3, J_4, J_6] / J_0)``, ``J_k = int_0^inf e^{-u y - y^2/2} He_k(z0 + y) dy``, ``u = z0 + a``."""
    u = z0 + a
    log_j0 = _log_j0(u)
    big = u >= _LAGUERRE_FROM
    # recurrence r_k = J_k / J_0 = He_{k-1}(z0) / J_0 - a r_{k-1}, where it does not cancel (u < 8; the
    # other branch gets harmless stand-ins so that neither branch overflows)
    a_r, z_r = jnp.where(big, 0.0, a), jnp.where(big, 0.0, z0)
    inv_r = jnp.exp(-jnp.where(big, 0.0, log_j0))
    r = [jnp.ones_like(u)]
    for k in range(1, 7):
        r.append(_hermite(k - 1, z_r) * inv_r - a_r * r[-1])
    # Gauss-Laguerre for large u
    uu = jnp.maximum(u, _LAGUERRE_FROM)
    z_g = jnp.where(big, z0, 0.0)
    inv_g = jnp.exp(-jnp.where(big, log_j0, 0.0))
    y = _GL_X / uu[..., None]
    base = _GL_W * jnp.exp(-0.5 * y * y) / uu[..., None]
    zy = z_g[..., None] + y
    he = {3: zy**3 - 3.0 * zy, 4: zy**4 - 6.0 * zy**2 + 3.0, 6: zy**6 - 15.0 * zy**4 + 45.0 * zy**2 - 15.0}
    out = [jnp.where(big, jnp.sum(base * he[k], axis=-1) * inv_g, r[k]) for k in (3, 4, 6)]
    return log_j0, out


def _standardised(kappa, eps):
    k1, k2 = kappa[..., 0], kappa[..., 1]
    # a floor keeping |z0| <= 1e12 (z0^2 finite): a degenerate law (a direction past its largest loss,
    # tilted to the bracket's edge) then gives a huge negative log delta instead of NaN
    k2 = jnp.maximum(k2, 1e-24 * (1.0 + (eps - k1) ** 2))
    s = jnp.sqrt(k2)
    return k2, s, (eps - k1) / s


def _log_gauss_term(k0, kappa, t, eps):
    """The Gaussian (zeroth-order) part of :func:`_log_terms`, without the correction ratios (cheap)."""
    _, s, z0 = _standardised(kappa, eps)
    # both tilts in one call (one traced ``log Phi``, not two)
    lj_t, lj_u = _log_j0(jnp.stack(jnp.broadcast_arrays(z0 + t * s, z0 + (t + 1.0) * s)))
    return k0 - t * eps - 0.5 * z0 * z0 - 0.5 * math.log(2.0 * math.pi) + log_sub_exp(lj_t, lj_u)


def _log_terms(k0, kappa, t, eps):
    """``(log delta with the skewness term, log delta with the second-order terms too)`` for one Edgeworth
    component with cumulants ``kappa = (k1, k2, k3, k4)``, at tilt ``t``."""
    k3, k4 = kappa[..., 2], kappa[..., 3]
    k2, s, z0 = _standardised(kappa, eps)
    g1, g2 = k3 / (s * k2), k4 / (k2 * k2)
    # both tilts in one call (the ratios and their ``log Phi`` traced once)
    z_b, a_t, a_u = jnp.broadcast_arrays(z0, t * s, (t + 1.0) * s)
    log_j0, ratios = _ratios(jnp.stack([z_b, z_b]), jnp.stack([a_t, a_u]))
    lj_t, lj_u = log_j0
    rt, ru = [r[0] for r in ratios], [r[1] for r in ratios]
    # Gaussian part: phi(z0) (J0(t) - J0(t + 1)), then the correction ratios relative to it
    log_gauss = -0.5 * z0 * z0 - 0.5 * math.log(2.0 * math.pi) + log_sub_exp(lj_t, lj_u)
    w = jnp.exp(lj_u - lj_t)  # J0(t + 1) / J0(t) < 1
    den = jnp.maximum(-jnp.expm1(lj_u - lj_t), 1e-300)
    rel = [(a - w * b) / den for a, b in zip(rt, ru)]  # (J_k(t) - J_k(t+1)) / (J_0(t) - J_0(t+1))
    first = 1.0 + g1 / 6.0 * rel[0]
    second = first + g2 / 24.0 * rel[1] + g1 * g1 / 72.0 * rel[2]
    base = k0 - t * eps + log_gauss
    # (no Gaussian mass, e.g. J_0(t) = J_0(t + 1) to rounding at a huge z0: no term, whatever the ratios)
    gone = base == -jnp.inf
    return tuple(
        jnp.where(gone, -jnp.inf, base + jnp.log(jnp.maximum(jnp.where(gone, 1.0, f), MIN_FACTOR)))
        for f in (first, second)
    )
