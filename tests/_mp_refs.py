"""Independent high-precision references (mpmath), written in output space x.

Nothing here calls jaxdp: these integrate the densities of the dominating pair
directly, ``K(t) = log int P(x)^(1+t) Q(x)^(-t) dx``, with mpmath's adaptive
quadrature at 40 digits.
"""

from __future__ import annotations

import mpmath as mp

mp.mp.dps = 40


def _npdf(x, mu, s):
    return mp.exp(-((x - mu) ** 2) / (2 * s * s)) / (s * mp.sqrt(2 * mp.pi))


def mixture_pair(sigma, c, p, direction):
    """Densities (P, Q) of the mixture-of-Gaussians pair."""
    sigma = mp.mpf(sigma)
    c = [mp.mpf(x) for x in c]
    p = [mp.mpf(x) for x in p]

    def mix(x):
        return mp.fsum(pj * _npdf(x, cj, sigma) for pj, cj in zip(p, c))

    def base(x):
        return _npdf(x, 0, sigma)

    return (mix, base) if direction == "remove" else (base, mix)


def mixture_cgf(t, sigma, c, p, direction="remove"):
    """``log int P^(1+t) Q^(-t)`` for the mixture pair; ``t`` real or complex."""
    P, Q = mixture_pair(sigma, c, p, direction)
    t = mp.mpmathify(t)

    def f(x):
        return mp.exp((1 + t) * mp.log(P(x)) - t * mp.log(Q(x)))

    s = mp.mpf(sigma)
    lam = abs(mp.re(1 + t)) + abs(t) + 1
    cmax = max(mp.mpf(x) for x in c)
    lo = -cmax * lam - 40 * s
    hi = cmax * lam + 40 * s
    pts = sorted({lo, hi, mp.mpf(0), *[mp.mpf(x) * k for x in c for k in (1, lam, -lam)]})
    pts = [x for x in pts if lo <= x <= hi]
    return mp.log(mp.quad(f, pts, maxdegree=10))


def laplace_cgf(t, b):
    """``log int P^(1+t) Q^(-t)`` for ``P = Lap(1, b)``, ``Q = Lap(0, b)``."""
    b = mp.mpf(b)
    t = mp.mpmathify(t)

    def f(x):
        lp = -abs(x - 1) / b - mp.log(2 * b)
        lq = -abs(x) / b - mp.log(2 * b)
        return mp.exp((1 + t) * lp - t * lq)

    return mp.log(mp.quad(f, [-mp.inf, 0, 1, mp.inf]))


def gaussian_delta(mu, eps):
    """Closed-form delta(eps) of the mu-Gaussian mechanism at high precision."""
    mu = mp.mpf(mu)
    eps = mp.mpf(eps)
    return mp.ncdf(-eps / mu + mu / 2) - mp.exp(eps) * mp.ncdf(-eps / mu - mu / 2)
