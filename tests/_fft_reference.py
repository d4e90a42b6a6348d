"""An independent delta(eps) of Poisson-subsampled Gaussian compositions by an exponentially tilted FFT.

Test-only oracle (numpy/scipy, none of jaxdp's code).  One step's privacy loss ``L`` is monotone in the
Gaussian output ``x``, so its law on a grid of cells ``[k dx, (k + 1) dx)`` follows from normal tail
functions (``scipy.stats.norm.sf``/``cdf``, full relative precision in the tails).  Moving every step's
loss to the upper (lower) end of its cell makes the composed loss larger (smaller) pointwise, and
``delta(eps) = E_P[(1 - e^{eps - L})_+]`` is increasing in ``L``: the two give an upper and a lower value
that bracket the truth (up to the FFT's rounding, ~1e-16 of the tilted law's peak).  The law is tilted
by ``e^{s L}`` before the FFT, so that a ``delta`` of 1e-14 sits in the bulk of what the FFT resolves
instead of under its rounding floor, and untilted after:
``delta = M(s)^T sum_b p_s(b) e^{-s b} (1 - e^{eps - b})_+``.  Only the number of steps enters as a
power of the transform, so the cost does not depend on it; the rounding to cells moves each step by
at most ``dx``, so the bracket widens with ``steps * dx``.

Losses above ``lmax`` are dropped (lower) or counted as ``delta``'s whole 1 (upper, a union bound over
the steps): both stay brackets.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm


def _step_cells(sigma, q, dx, lmax, direction):
    """``(lower ends, upper ends, masses)`` of one step's loss law on cells of width ``dx``."""
    if direction == "remove":
        # x ~ (1 - q) N(0, s^2) + q N(1, s^2);  L = log(1 - q + q e^{(2x - 1)/(2 s^2)}), increasing in x
        lmin = np.log1p(-q)
        k0, k1 = int(np.floor(lmin / dx)), int(np.ceil(lmax / dx))
        edges = np.arange(k0, k1 + 1) * dx
        arg = np.expm1(edges) + q
        with np.errstate(divide="ignore", invalid="ignore"):
            xb = np.where(arg > 0, 0.5 + sigma**2 * np.log(np.maximum(arg, 1e-300) / q), -np.inf)
        sf = (1 - q) * norm.sf(xb / sigma) + q * norm.sf((xb - 1) / sigma)
        cdf = (1 - q) * norm.cdf(xb / sigma) + q * norm.cdf((xb - 1) / sigma)
        above = sf[-1]
    else:
        # x ~ N(0, s^2);  L = -log(1 - q + q e^{(2x - 1)/(2 s^2)}), decreasing in x, below -log(1 - q)
        lmax = min(lmax, -np.log1p(-q))
        k0, k1 = int(np.floor(-8.0 / dx)), int(np.ceil(lmax / dx))
        edges = np.arange(k0, k1 + 1) * dx
        arg = np.exp(-edges) - 1 + q
        with np.errstate(divide="ignore", invalid="ignore"):
            xb = np.where(arg > 0, 0.5 + sigma**2 * np.log(np.maximum(arg, 1e-300) / q), -np.inf)
        # P(L >= l) = P(x <= x(l)): the roles of sf and cdf swap
        sf, cdf = norm.cdf(xb / sigma), norm.sf(xb / sigma)
        above = 0.0
    use_sf = sf < 0.5
    mass = np.maximum(np.where(use_sf[:-1], sf[:-1] - sf[1:], cdf[1:] - cdf[:-1]), 0.0)
    return edges[:-1], edges[1:], mass, above


def _saddle_tilt(ends, mass, steps, eps):
    """The tilt ``s`` whose tilted mean of the composed (grid) loss is ``eps + 1/s``, by bisection in ``log s``."""
    with np.errstate(divide="ignore"):
        log_mass = np.log(mass)
    lo, hi = -5.0, 12.0
    for _ in range(60):
        s = np.exp(0.5 * (lo + hi))
        lw = log_mass + s * ends
        w = np.exp(lw - np.max(lw))
        mean = steps * np.sum(w * ends) / np.sum(w)
        lo, hi = (0.5 * (lo + hi), hi) if mean < eps + 1.0 / s else (lo, 0.5 * (lo + hi))
    return float(np.exp(0.5 * (lo + hi)))


def psg_log_delta_bracket(
    sigma, q, steps, eps, *, tilt=None, direction="remove", dx=2e-6, lmax=1.0, n_fft=2**21
) -> tuple[float, float]:
    """``(lower, upper)`` values of ``log delta(eps)`` for ``steps`` compositions of the Poisson-subsampled
    Gaussian, one adjacency direction.  ``tilt``: the exponent ``s`` (default: the grid law's saddle point at
    ``eps``)."""
    lo_end, hi_end, mass, above = _step_cells(sigma, q, dx, lmax, direction)
    if tilt is None:
        tilt = _saddle_tilt(hi_end, mass, steps, eps)
    out = []
    for ends, extra in ((lo_end, 0.0), (hi_end, above)):
        mass_u = mass.copy()
        mass_u[-1] += extra
        k = np.rint(ends / dx).astype(np.int64)
        with np.errstate(divide="ignore"):
            lw = np.log(mass_u) + tilt * ends
        c = np.max(lw)
        w = np.exp(lw - c)
        log_m = c + np.log(w.sum())
        w /= w.sum()
        grid = np.zeros(n_fft)
        np.add.at(grid, k % n_fft, w)
        comp = np.fft.irfft(np.fft.rfft(grid) ** steps, n_fft)
        # unwrap around the tilted law's mean (its mass lies within the window)
        mean = steps * np.sum(w * ends)
        base = int(np.floor(mean / dx)) - n_fft // 2
        m = (np.arange(n_fft) - base) % n_fft + base
        b = m * dx
        pos = (b > eps) & (comp > 0)
        terms = np.log(comp[pos]) - tilt * b[pos] + np.log(-np.expm1(eps - b[pos]))
        top = terms.max()
        out.append(float(steps * log_m + top + np.log(np.exp(terms - top).sum())))
    if above > 0:  # the upper value: any step past lmax counts as delta's whole 1 (a union bound)
        out[1] = float(np.logaddexp(out[1], np.log(steps * above)))
    return out[0], out[1]
