"""The FFT window: the composed tilted lattice law, its dropped masses and the FFT's error bound."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.accountants import _cgf
from jaxdp.accountants.certified import _lattice
from jaxdp.accountants.certified._constants import (
    _CHERNOFF_ABS,
    _CHERNOFF_STEPS,
    _GAMMA4,
    _NEG,
    _TINY,
    _U,
    _X_FAR,
    COARSE_FACTOR,
    COARSE_SHARE,
    FINE_TILTED_MASS,
    TAIL_FRACTION,
    WINDOW_SDS_ABOVE,
    WINDOW_SDS_BELOW,
)
from jaxdp.accountants.certified._lattice import (
    _grid,
    _lattice_index,
    _loss_range,
    _mixture_of,
    _num_present,
    _step_pmf,
)
from jaxdp.mechanisms import Composition, by_direction, log_ratio
from jaxdp.mechanisms.internal import scan_parts


def _fft_rho(num_bins):
    """Higham's relative 2-norm bound of one FFT of ``num_bins`` points, taken 4x."""
    return 4.0 * math.log2(num_bins) * (_U + _GAMMA4 * (math.sqrt(2.0) + _U))


class _Window(NamedTuple):
    log_y: jax.Array  # (NUM_BINS,) log of the computed tilted composed pmf, clipped below at _TINY
    ell_start: jax.Array  # loss of window point 0
    spacing: jax.Array
    tilt: jax.Array
    log_scale: jax.Array  # G = sum_i n_i log Z_i (untilting exponent)
    log_rest: jax.Array  # log(sum_i n_i p_inf,i + Chernoff bound above the window)
    log_rel: jax.Array  # log1p of the relative floating-point factor
    log_fft_error: jax.Array  # log of the 2-norm bound on (computed - exact) over the window


def _fine_top(log_p, c, s, direction, t, n_total):
    """Loss up to which the lattice must be fine: the tilted per-step law's bumps to their tolerance.

    Under "remove" the tilted law ``Q R^{1+t}`` is at most ``K^t sum_i`` of Gaussian bumps centred at
    ``(1 + t) c_i`` with weights ``p_i^{1+t} exp(t (1 + t) c_i^2 / (2 s^2))``; each is covered until its
    share of the tilted mass drops below ``FINE_TILTED_MASS / n_total``.  Coarse cells above only
    loosen the bound (second order in their width, times that mass).  Under "add" the loss is bounded
    above and its top is where the mass is: the whole range stays fine.
    """
    if isinstance(direction, str) and direction != "remove":
        return jnp.inf
    tt = jnp.maximum(t, 0.0)
    ok = log_p > _NEG
    log_w = jnp.where(ok, (1.0 + tt) * log_p + tt * (1.0 + tt) * c * c / (2.0 * s * s), _NEG)
    z2 = 2.0 * (log_w - jax.nn.logsumexp(log_w) - math.log(FINE_TILTED_MASS) + jnp.log(n_total))
    x = jnp.max(jnp.where(ok & (z2 > 0), (1.0 + tt) * c + jnp.sqrt(jnp.maximum(z2, 0.0)) * s, -jnp.inf))
    x = jnp.where(jnp.isfinite(x), x, jnp.max(c) + _X_FAR * s)  # (the heaviest bump always qualifies)
    return by_direction(direction, log_ratio(x[None], log_p, c, s)[0], jnp.inf)


def _tail_z(comp: Composition, log_delta_est):
    """Output range (in noise deviations) so that ``sum_i n_i p_inf,i <= TAIL_FRACTION x delta``.

    Every step's ``P``-mass beyond ``z`` deviations is at most ``Phi(-z) <= exp(-z^2 / 2) / 2``.
    Only tightness depends on this choice: the +inf atoms are counted in full.
    """
    log_tau = log_delta_est + math.log(TAIL_FRACTION) - jnp.log(comp.total_count())
    return jnp.clip(jnp.sqrt(2.0 * jnp.maximum(-log_tau, 0.0)), 3.0, 40.0)


def _build_window(comp: Composition, direction: str, t, log_delta_est, grid=None) -> _Window:
    """The tilted composed lattice law on a window around its mean (module docstring).

    The parts (a stack's segments one by one, :func:`~jaxdp.mechanisms.internal.scan_parts`) are visited twice: once
    for the lattice spacing and the composed offset, once for the per-step lattice laws and their spectra.
    """
    num_bins, lattice_size = _grid(grid, comp)
    t = jax.lax.stop_gradient(t)
    z = jax.lax.stop_gradient(_tail_z(comp, log_delta_est))
    _, k1, k2 = jax.lax.stop_gradient(_cgf.k012(comp, direction, t))
    sd = jnp.sqrt(jnp.maximum(k2, 1e-300))
    n_total = comp.total_count()
    coarse_size = lattice_size // COARSE_SHARE
    reach = lattice_size - 1 + COARSE_FACTOR * coarse_size  # index of the last lattice point

    def range_of(m):
        return jax.lax.stop_gradient(_loss_range(*_mixture_of(m), direction, z))

    # the fine lattice covers the tilted law (see _fine_top); above it, up to the range of z, cells
    # may be COARSE_FACTOR wide
    def geometry(acc, m, n):
        offset, support, spacing, present = acc
        lo, hi = range_of(m)
        top = jnp.minimum(jax.lax.stop_gradient(_fine_top(*_mixture_of(m), direction, t, n_total)), hi)
        spacing = jnp.maximum(spacing, jnp.maximum((hi - lo) / reach, (top - lo) / (lattice_size - 1)))
        present = jnp.maximum(present, _num_present(_mixture_of(m)[0]))
        # loss of composed index 0, composed range, spacing floor, most components of positive weight
        return offset + n * lo, support + n * (hi - lo), spacing, present

    zero = jnp.zeros((), jnp.float64)
    offset, support, min_spacing, present = scan_parts(comp, geometry, (zero, zero, zero, zero))
    # The window's size is static, by shape (_grid).  A wide window (mixtures of more than two components)
    # also carries the narrow one, used when at most two components have positive weight: a two-point law
    # padded with zero weights (group_curve's g = 1) then gets exactly the unpadded law's window.
    sizes = (num_bins,)
    narrow = None
    if grid is None and num_bins == _lattice.MIXTURE_NUM_BINS and _lattice.NUM_BINS < num_bins:
        sizes = (num_bins, _lattice.NUM_BINS)
        narrow = present <= 2
    divisions = num_bins if narrow is None else jnp.where(narrow, float(sizes[1]), float(num_bins))
    # the window spans WINDOW_SDS_BELOW + WINDOW_SDS_ABOVE tilted deviations, never more than the support
    spacing = jnp.maximum(jnp.minimum((WINDOW_SDS_BELOW + WINDOW_SDS_ABOVE) * sd, support) / divisions, min_spacing)
    spacing = jnp.maximum(spacing, 1e-300)
    width = divisions * spacing
    start = jnp.clip(k1 - WINDOW_SDS_BELOW * sd, offset, jnp.maximum(offset + support - width, offset))
    j0 = jnp.floor((start - offset) / spacing)
    ell_start = offset + j0 * spacing

    s_grid = jnp.concatenate([t + _CHERNOFF_STEPS / sd, _CHERNOFF_ABS])  # any s >= 0 gives a valid bound
    lattice_index = _lattice_index(lattice_size, coarse_size)
    # per window size: entries summed into one window point (the folds of the fine part, plus the coarse
    # points) and where the coarse points land
    folds = [(lattice_size // n if lattice_size >= n else 1) + -(-reach // n) for n in sizes]
    coarse_ats = [np.mod(lattice_index[lattice_size:], n).astype(np.int64) for n in sizes]

    def step(acc, mech, n):
        log_scale, log_inf, log_chernoff, spectra = acc
        lo, hi = range_of(mech)
        pmf = _step_pmf(mech, direction, lo, spacing, lattice_size, coarse_size, hi + spacing)
        kd = pmf.index * spacing
        tilted = pmf.log_pmf + t * kd
        log_z = jax.nn.logsumexp(tilted)
        v_all = jnp.exp(tilted - log_z)
        log_scale = log_scale + n * (log_z + t * lo)
        log_inf = jnp.logaddexp(log_inf, jnp.log(n) + pmf.log_p_inf)
        # Chernoff on the (untilted, inflated) lattice measure: sum_i n_i K_i(s)
        k_s = jax.nn.logsumexp(pmf.log_pmf[None, :] + s_grid[:, None] * (lo + kd)[None, :], axis=1)
        log_chernoff = log_chernoff + n * k_s
        new_spectra = []
        for size, fold, coarse_at, (log_spec, rel, fft_terms, sum_bound, pow_terms) in zip(
            sizes, folds, coarse_ats, spectra
        ):
            v = v_all[:lattice_size]
            if lattice_size >= size:
                v = v.reshape(lattice_size // size, size).sum(axis=0)
            else:
                v = jnp.zeros(size).at[:lattice_size].set(v)
            v = v.at[coarse_at].add(v_all[lattice_size:])
            rel = rel + n * 8 * _U * (jnp.max(jnp.abs(t * kd)) + jnp.abs(log_z) + 4.0 + fold)
            total = jnp.sum(v)
            norm2 = jnp.sqrt(jnp.sum(v * v))
            spec = jnp.fft.rfft(v)
            log_abs = jnp.log(jnp.abs(spec))
            log_spec = log_spec + n * jnp.log(spec.astype(jnp.complex128))
            fft_rho = _fft_rho(size)
            fft_terms = fft_terms + n * fft_rho * norm2
            sum_bound = sum_bound + n * jnp.log(total + fft_rho * math.sqrt(size) * norm2)
            pow_terms = pow_terms + n * (jnp.abs(jnp.where(jnp.isfinite(log_abs), log_abs, 0.0)) + math.pi + 1.0)
            new_spectra.append((log_spec, rel, fft_terms, sum_bound, pow_terms))
        return log_scale, log_inf, log_chernoff, tuple(new_spectra)

    init = (
        zero,
        jnp.asarray(_NEG, jnp.float64),
        jnp.zeros(s_grid.shape, jnp.float64),
        tuple(
            (jnp.zeros(n // 2 + 1, jnp.complex128), zero, zero, zero, jnp.zeros(n // 2 + 1, jnp.float64)) for n in sizes
        ),
    )
    log_scale, log_inf, log_chernoff, spectra = scan_parts(comp, step, init)

    def window(size, log_spec, rel, fft_terms, sum_bound, pow_terms):
        z = jnp.exp(log_spec)
        y = jnp.fft.irfft(z, n=size)
        growth = jnp.maximum(1.0, jnp.exp(sum_bound))
        pow_abs = 8 * _U * (pow_terms + 2.0) * jnp.abs(z)
        bound = (
            growth * fft_terms
            + math.sqrt(2.0) * jnp.sqrt(jnp.sum(pow_abs * pow_abs)) / math.sqrt(size)
            + 1.01 * _fft_rho(size) * jnp.sqrt(jnp.sum(y * y))
        )
        bound = 1.01 * bound + _TINY
        y = jnp.roll(y, -jnp.mod(j0, size).astype(jnp.int32))  # (int32 indices: see numerics/_boundary.py)
        # (a narrow window padded to the static size: points above it hold nothing, their mass is in log_rest)
        log_y = jnp.log(jnp.maximum(jnp.concatenate([y, jnp.zeros(num_bins - size)]), _TINY))
        log_tail = jnp.min(log_chernoff - s_grid * (ell_start + size * spacing))
        log_rest = jnp.logaddexp(log_inf, log_tail)
        return _Window(log_y, ell_start, spacing, t, log_scale, log_rest, jnp.log1p(rel), jnp.log(bound))

    wins = [window(size, *acc) for size, acc in zip(sizes, spectra)]
    if narrow is None:
        return wins[0]
    return jax.tree.map(lambda w, n: jnp.where(narrow, n, w), wins[0], wins[1])


def _log_weights(win: _Window, eps):
    """``log w_r(eps)``, ``w_r = e^{-t (l_r - eps)} (1 - e^{eps - l_r})`` for ``l_r > eps`` (``_NEG`` below)."""
    eps = jnp.asarray(eps)
    num_bins = win.log_y.shape[-1]
    ell = win.ell_start + jnp.arange(num_bins, dtype=jnp.float64) * win.spacing
    gap = ell - eps[..., None]
    above = gap > 0
    gap_s = jnp.where(above, gap, 1.0)
    return jnp.where(above, -win.tilt * gap_s + jnp.log(-jnp.expm1(-gap_s)), _NEG)


def _log_fft_term(win: _Window, log_w):
    """Cauchy-Schwarz bound ``||w||_2 ||e||_2`` on the FFT error's share of the untilting sum (``log_w``: log w)."""
    return win.log_fft_error + 0.5 * jax.nn.logsumexp(2.0 * log_w, axis=-1)


def _window_log_delta(win: _Window, eps):
    """Certified log delta at ``eps`` from the window (0 where ``eps`` is outside it)."""
    eps = jnp.asarray(eps)
    if eps.ndim:  # a few candidates: one fused pass each (a reduction over a 2-D array is several times slower)
        outs = [_window_log_delta(win, e) for e in eps]
        return jnp.stack([o[0] for o in outs]), jnp.stack([o[1] for o in outs])
    num_bins = win.log_y.shape[-1]
    log_w = _log_weights(win, eps)
    log_s = jnp.logaddexp(jax.nn.logsumexp(win.log_y + log_w, axis=-1), _log_fft_term(win, log_w))
    log_fin = win.log_scale - win.tilt * eps + log_s + win.log_rel + jnp.log1p(4 * _U * num_bins)
    inside = (eps >= win.ell_start) & (eps < win.ell_start + (num_bins - 1) * win.spacing)
    out = jnp.logaddexp(log_fin, win.log_rest)
    return jnp.where(inside, jnp.minimum(out, 0.0), 0.0), log_fin
