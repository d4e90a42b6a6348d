"""The pessimistic lattice PLD of one step: loss cells, their masses from normal intervals, the split."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.accountants.certified._constants import (
    _BAD_CELLS,
    _FAST_NARROW,
    _FAST_ORDER,
    _NEG,
    _TINY,
    _U,
    _X_FAR,
    COARSE_FACTOR,
    LATTICE_SIZE,
    MIXTURE_NUM_BINS,
    NUM_BINS,
    Z_TAIL,
)
from jaxdp.mechanisms import Gaussian, MixtureMechanism, by_direction, log_ratio, segment
from jaxdp.mechanisms.internal import UNROLL, inverse_log_ratio, is_stacked, scaled_exps
from jaxdp.numerics import argmax, keep_x64_mode, log1p, log_normal_mass, mean_factor


def _mixture_of(mech):
    """``(log_p, c, s)`` of a mechanism whose dominating pair is a Gaussian mixture.

    A component of weight zero (``log_p`` below ``_NEG``: padding, such as :func:`~jaxdp.group_curve`'s) is
    no part of the law, but every range below is a reduction over the components (``max c``, ``min c``):
    its sensitivity is replaced by that of the heaviest component, so those reductions see the present
    components only (and the component itself still contributes nothing: its weight stays zero).
    """
    if isinstance(mech, Gaussian):
        s = jnp.asarray(mech.noise_multiplier, jnp.float64)
        return jnp.zeros(1), jnp.ones(1), s
    if isinstance(mech, MixtureMechanism):
        log_p, c, s = mech.mixture()
        stand_in = jax.lax.stop_gradient(c[argmax(log_p)])
        return log_p, jnp.where(_present(log_p), c, stand_in), s
    raise NotImplementedError(
        f"method='certified' supports Gaussian and mixture-of-Gaussians mechanisms "
        f"(Poisson-subsampled Gaussian included), not {type(mech).__name__}; "
        "use method='delta2-certified' or 'rdp' for it."
    )


def _present(log_p):
    """The components of positive weight (``log_p`` at or below ``_NEG`` is a weight of zero here)."""
    return log_p > _NEG


def _num_present(log_p):
    """How many components have positive weight (at least 1; traced)."""
    return jnp.maximum(jnp.sum(_present(log_p)), 1).astype(jnp.float64)


def _clamp_edges(x, c, s):
    """Cell edges clamped to ``[-_X_FAR s, max c + _X_FAR s]`` (finite, for finite gradients)."""
    return jnp.clip(x, -_X_FAR * s, jnp.max(c) + _X_FAR * s)


class _StepPmf(NamedTuple):
    log_pmf: jax.Array  # (lattice points,) log of the inflated lattice pmf at a + index D
    start: jax.Array  # a
    log_p_inf: jax.Array  # log P-mass of the +inf atom (inflated)
    index: jax.Array  # (lattice points,) lattice index of each point: 0..L-1, then L-1 + COARSE_FACTOR j


def _lattice_index(lattice_size, coarse_size):
    """Lattice indices of the points: ``lattice_size`` consecutive, then ``coarse_size`` every ``COARSE_FACTOR``."""
    fine = np.arange(lattice_size, dtype=np.float64)
    coarse = lattice_size - 1 + COARSE_FACTOR * np.arange(1, coarse_size + 1, dtype=np.float64)
    return np.concatenate([fine, coarse])


def _loss_range(log_p, c, s, direction, z=Z_TAIL):
    """``(lowest, highest)`` loss over the covered output range (``P``-mass ``<= exp(-z^2 / 2) / 2`` beyond it)."""
    # remove: P is the mixture: component i is covered to z_i deviations with p_i exp(-z_i^2 / 2) =
    # exp(-z^2 / 2) / K, so the P-mass above is at most exp(-z^2 / 2) (rarer components need fewer deviations);
    # add: P = N(0, s^2), covered to z deviations, and L = -log R decreasing in the output
    # (K counts the components of positive weight: the others hold no mass and are not covered)
    z_i = jnp.sqrt(jnp.maximum(z * z + 2.0 * (jnp.maximum(log_p, _NEG) + jnp.log(_num_present(log_p))), 0.0))
    top = jnp.max(jnp.where(_present(log_p), c + z_i * s, -jnp.inf))
    xs = by_direction(direction, jnp.stack([-z * s, top]), jnp.stack([z * s, -z * s]))
    sign = by_direction(direction, 1.0, -1.0)
    lo, hi = sign * log_ratio(xs, log_p, c, s)
    return lo, hi


def _exact_log_masses(xa, xb, log_p, c, s):
    """Log masses of ``[xa, xb]`` under the mixture and under ``N(0, s^2)``, component by component in log space."""

    # one scan over the components and then N(0, s^2) (the last step): one traced copy of the interval mass
    def body(acc, comp):
        mix, gauss = acc
        lp, ci, last = comp
        lm = jnp.maximum(log_normal_mass(xa, xb, ci, s), _NEG)
        return (jnp.where(last, mix, jnp.logaddexp(mix, lp + lm)), jnp.where(last, lm, gauss)), None

    k = log_p.shape[0]
    lps = jnp.concatenate([jnp.maximum(log_p, _NEG), jnp.zeros(1, log_p.dtype)])
    cs = jnp.concatenate([c, jnp.zeros(1, jnp.result_type(c))])
    neg = jnp.full(xa.shape, _NEG)
    (mix, gauss), _ = jax.lax.scan(body, (neg, neg), (lps, cs, jnp.arange(k + 1) == k))
    return mix, gauss


def _linear_mixture_sum(factor, x, lp, c, inv_s):
    """``(R, S)`` with ``sum_i exp(lp_i - m_i^2 / 2) factor(m_i) = e^R S``, ``m_i = (x - c_i) / s``, ``R`` the largest
    exponent (no gradient).  Unrolled over the components (XLA fuses it into one loop over ``x``, much faster
    than a reduction over a (components, points) array); an online rescaled scan for large mixtures."""
    k = lp.shape[0]
    if k <= UNROLL:
        ms = [(x - c[i]) * inv_s for i in range(k)]
        r, ws = scaled_exps([lp[i] - 0.5 * ms[i] * ms[i] for i in range(k)])
        return r, sum(wi * factor(mi) for wi, mi in zip(ws, ms))

    def body(carry, comp):
        r, total = carry
        lpi, ci = comp
        mi = (x - ci) * inv_s
        e = lpi - 0.5 * mi * mi
        r_new = jax.lax.stop_gradient(jnp.maximum(r, e))
        return (r_new, total * jnp.exp(r - r_new) + jnp.exp(e - r_new) * factor(mi)), None

    (r, total), _ = jax.lax.scan(body, (jnp.full(x.shape, 2 * _NEG), jnp.zeros(x.shape)), (lp, c))
    return r, total


def _gathered_cells(xa, xb, idx, mix, gauss, log_p, c, s):
    """``(mix, gauss)`` with the log-space masses of the cells ``idx`` (out-of-range indices: none)."""
    mix_b, gauss_b = _exact_log_masses(jnp.take(xa, idx, mode="clip"), jnp.take(xb, idx, mode="clip"), log_p, c, s)
    return mix.at[idx].set(mix_b, mode="drop"), gauss.at[idx].set(gauss_b, mode="drop")


def _wide_cells(xa, xb, bad, mix, gauss, log_p, c, s):
    """``(mix, gauss)`` with the log-space masses of :func:`_exact_log_masses` in the ``bad`` cells.

    Computed in chunks of ``_BAD_CELLS`` gathered cells (usually one chunk) through one loop: one traced copy of
    the log-space sum.  A ``while_loop`` of data-dependent length has no reverse-mode derivative, so the
    derivative (a ``custom_jvp``, traced only where one is asked for) is that of the same values computed as a
    ``cond`` between the gathered cells and every cell."""

    def by_cond(xa, xb, bad, mix, gauss, log_p, c, s):
        def gathered(mix, gauss):
            idx = jnp.nonzero(bad, size=_BAD_CELLS, fill_value=bad.shape[0])[0].astype(jnp.int32)  # _boundary.py
            return _gathered_cells(xa, xb, idx, mix, gauss, log_p, c, s)

        def everywhere(mix, gauss):
            mix_e, gauss_e = _exact_log_masses(xa, xb, log_p, c, s)
            return jnp.where(bad, mix_e, mix), jnp.where(bad, gauss_e, gauss)

        return jax.lax.cond(jnp.sum(bad) <= _BAD_CELLS, gathered, everywhere, mix, gauss)

    @jax.custom_jvp
    def chunked(xa, xb, bad, mix, gauss, log_p, c, s):
        rank = jnp.cumsum(bad) - 1

        def chunk(state):
            k, mix, gauss = state
            take = bad & (rank >= k * _BAD_CELLS)
            idx = jnp.nonzero(take, size=_BAD_CELLS, fill_value=bad.shape[0])[0].astype(jnp.int32)
            return (k + 1, *_gathered_cells(xa, xb, idx, mix, gauss, log_p, c, s))

        chunks = (jnp.sum(bad) + _BAD_CELLS - 1) // _BAD_CELLS
        _, mix, gauss = jax.lax.while_loop(lambda state: state[0] < chunks, chunk, (jnp.int32(0), mix, gauss))
        return mix, gauss

    @chunked.defjvp
    @keep_x64_mode
    def _jvp(primals, tangents):
        return jax.jvp(by_cond, primals, tangents)

    return chunked(xa, xb, bad, mix, gauss, log_p, c, s)


def _interval_log_masses(edges, log_p, c, s):
    """Log masses between consecutive ``edges`` under the mixture and under ``N(0, s^2)``, with error bounds.

    Returns ``(log_mix, log_gauss, err_mix, err_gauss)``, the error bounds on the
    *relative* error of each mass.  The cells are those of the floating-point
    edges exactly: a cell's width comes from ``xb - xa`` (exact for adjacent
    edges, Sterbenz) and its mass is ``w phi(m) E`` (Hermite series of
    :func:`mean_factor`); rounding the midpoint ``m`` or, for a wide interval,
    the ends ``(x - c) / s`` of each component is a relative error of the mass
    below ``~40 u Z^2`` (``Z`` the larger end in deviations, plus ``c_max / s``
    and 2), and ``log_ndtr``'s few ulp are ``u Z^2`` too.  Where every component
    is narrow (``w max(1, |m|) <= 1/8``: all but a few hundred cells at the ends)
    the mixture is summed in linear space, ``e^R sum_i e^{log p_i - m_i^2 / 2 - R} E_i``
    with ``R`` the largest exponent: one logarithm per cell instead of one
    ``log`` and one ``logaddexp`` per component.  The other cells (up to
    ``_BAD_CELLS``, else all of them) are summed in log space.
    """
    # K counts the components of positive weight: one of weight zero adds an exact zero to the linear sum and
    # leaves the log-space sum unchanged (its term underflows), so it adds no rounding
    k = _num_present(log_p)
    xa, xb = edges[:-1], edges[1:]
    lp = jnp.maximum(log_p, _NEG)
    inv_s = 1.0 / s
    w = (xb - xa) * inv_s
    xm = 0.5 * (xa + xb)
    m0 = xm * inv_s
    # the largest |m_i| is at the smallest or the largest mean
    m_far = jnp.maximum(jnp.abs(m0 - jnp.min(c) * inv_s), jnp.abs(m0 - jnp.max(c) * inv_s))
    empty = ~(w > 0)  # equal edges (clamped); a decreasing pair fails the edge check of _step_pmf
    bad = ~(w * jnp.maximum(1.0, jnp.maximum(m_far, jnp.abs(m0))) <= _FAST_NARROW) & ~empty
    # the linear-space sum, on inputs made harmless where a cell is bad (its value is replaced)
    w_g = jnp.where(bad | empty, 1e-3, w)
    xm_g = jnp.where(bad | empty, 0.0, xm)
    m0_g = jnp.where(bad | empty, 0.0, m0)
    r, scaled = _linear_mixture_sum(lambda mi: 1.0 + mean_factor(mi, w_g, _FAST_ORDER), xm_g, lp, c, inv_s)
    log_w = jnp.log(w_g) - 0.5 * math.log(2.0 * math.pi)
    mix = jnp.where(empty, _NEG, r + jnp.log(scaled) + log_w)
    gauss = jnp.where(empty, _NEG, -0.5 * m0_g * m0_g + jnp.log1p(mean_factor(m0_g, w_g, _FAST_ORDER)) + log_w)

    mix, gauss = _wide_cells(xa, xb, bad, mix, gauss, log_p, c, s)
    mix = jnp.maximum(mix, _NEG)
    gauss = jnp.maximum(gauss, _NEG)
    # relative error bounds: the linear sum (K terms of a few ulp of their exponents), or the log-space sum
    # (K logaddexps of values of size |log P|), plus the rounding of the arguments and log_ndtr (Z^2)
    z2 = ((jnp.maximum(jnp.abs(xa), jnp.abs(xb)) + jnp.max(c)) * inv_s + 2.0) ** 2
    lp_max = jnp.max(jnp.where(lp > _NEG, jnp.abs(lp), 0.0))
    mult = jnp.where(bad, k + 2.0, 1.0)
    err_mix = 64 * _U * mult * (k + 4.0 + jnp.abs(mix) + lp_max + z2) + 1e-300
    err_gauss = 64 * _U * (5.0 + jnp.abs(gauss) + z2) + 1e-300
    return jax.lax.optimization_barrier((mix, gauss, err_mix, err_gauss))


def _grid(grid, comp):
    """``(num_bins, lattice_size)``: ``grid``, or the module's (read when traced) for None.

    Compositions with a mixture of more than two components (group privacy) get ``MIXTURE_NUM_BINS``:
    their tilted laws are wide, and a window of ``NUM_BINS`` would set a lattice spacing above 1e-4.  The
    size is static, by shape; the spacing is not: a two-point law padded with zero-weight components
    (``group_curve``'s row ``g = 1``) gets ``NUM_BINS``'s spacing on the wider window (``_build_window``), so
    padding leaves its lattice, and its epsilon, as they were.
    """
    if grid is not None:
        return grid

    def components(m, n):  # (a stack: one segment's)
        one = segment(m, 0) if is_stacked(n) else m
        return jax.eval_shape(lambda m: _mixture_of(m)[0], one).shape[0]

    wide = any(components(m, n) > 2 for m, n in zip(comp.mechanisms, comp.counts))
    return (MIXTURE_NUM_BINS if wide else NUM_BINS, LATTICE_SIZE)


def _step_pmf(mech, direction: str, start, spacing, lattice_size=None, coarse_size=0, top=None) -> _StepPmf:
    """Inflated connect-the-dots lattice pmf of one step (see the module docstring, items 1 and 4).

    Floating point: each cell edge is solved for the loss ``l_k - eta_k`` and its
    realised loss checked to lie in ``[l_k - 2 eta_k, l_k]`` (else the step is
    all ``+inf`` atom: a vacuous but valid bound), so every cell's losses lie in
    ``[l_k - 2 eta_k, l_{k+1}]``; the split's share of the lower point is then
    computed from a lower bound on the cell's ``E_P[e^{-(L - l_k)}]`` and lowered
    by its own rounding, which moves mass *up* within the cell (dominance is
    kept) instead of adding mass; only the masses themselves are inflated
    (relatively, by the error bounds of :func:`_interval_log_masses`).
    """
    log_p, c, s = _mixture_of(mech)
    index = jnp.asarray(_lattice_index(LATTICE_SIZE if lattice_size is None else lattice_size, coarse_size))
    ell = start + index * spacing
    width = (index[1:] - index[:-1]) * spacing  # cell widths: D, then COARSE_FACTOR D
    c_max = jnp.max(c)
    s2 = s * s
    lp_max = jnp.max(jnp.where(log_p > _NEG, jnp.abs(log_p), 0.0))
    sign = by_direction(direction, 1.0, -1.0)
    # loss error of a computed edge (logsumexp of terms of size |log p| + (c |x| + c^2) / s^2)
    eta = 16 * _U * (4.0 + jnp.abs(ell) + lp_max + 2.0 * (c_max * (c_max + _X_FAR * s) + c_max * c_max) / s2)
    x_raw = inverse_log_ratio(sign * (ell - eta), log_p, c, s)  # remove: increasing; add: decreasing
    x = _clamp_edges(x_raw, c, s)
    realised = sign * log_ratio(jax.lax.stop_gradient(x), log_p, c, s)
    rho = 8 * _U * (4.0 + jnp.abs(realised) + lp_max + (c_max * jnp.abs(x) + c_max * c_max) / s2)
    interior = jax.lax.stop_gradient(jnp.isfinite(x_raw) & (x_raw == x))
    edges_ok = jnp.all(jnp.where(interior, (realised <= ell - rho) & (realised >= ell - 2.0 * eta + rho), True))
    # the edges in increasing output order (add: the loss decreases in the output); the masses of the
    # mixture and of N(0, s^2) are P's and Q's (remove) or Q's and P's in reverse (add)
    edges = jnp.concatenate([(-_X_FAR * s)[None], by_direction(direction, x, x[::-1]), (c_max + _X_FAR * s)[None]])
    mix, base, err_mix, err_base = _interval_log_masses(edges, log_p, c, s)
    log_pm, log_qm, err_pm, err_qm = by_direction(
        direction, (mix, base, err_mix, err_base), (base[::-1], mix[::-1], err_base[::-1], err_mix[::-1])
    )
    # interval j = 0: below the lattice; j = 1..K-1: cell [l_{j-1}, l_j]; j = K: above.
    # P-masses inflated by their relative error bound (and the rounding of doing so)
    log_pm = log_pm - log1p(-err_pm) + jnp.log1p(8 * _U * (2.0 + jnp.abs(log_pm)))
    cells_p = log_pm[1:-1]
    cells_q = log_qm[1:-1]
    left = ell[:-1]
    # lower bound on lr = log E_P[e^{-(L - l)} | cell] (the sliver below l rounded up to l lowers it by <= 2 eta)
    # and the error of the computed Q-mass
    err_lr = (
        16 * _U * (2.0 + jnp.abs(cells_p) + jnp.abs(cells_q) + jnp.abs(left))
        + 1.01 * err_qm[1:-1]
        + 2.02 * eta[:-1] * jnp.exp(width)
    )
    # a Q-mass at the floor _NEG was raised to it (its true value is smaller): only lr >= -width is known there
    # (every loss of the cell is at most l_{k+1}), which sends the whole cell up
    q_known = cells_q > _NEG
    lr = jnp.where(cells_p > _NEG, jnp.where(q_known, cells_q - cells_p + left - err_lr, -width), 0.0)
    lr = jnp.clip(lr, -width, 0.0)
    # share of the lower point, f = (e^lr - e^-w) / (1 - e^-w) (w the cell width), lowered by its rounding
    xa = lr + width
    f = jnp.where(xa > 0, jnp.expm1(jnp.where(xa > 0, xa, 1.0)) / jnp.expm1(width), 0.0)
    f = jnp.clip(f - 8 * _U * (1.0 + jnp.exp(width)), 0.0, 1.0)
    log_a = cells_p + jnp.where(f > 0, jnp.log(jnp.where(f > 0, f, 1.0)), _NEG)
    log_b = cells_p + jnp.where(f < 1, log1p(-jnp.where(f < 1, f, 0.0)), _NEG)
    neg_inf = jnp.full(1, _NEG)
    log_to_k = jnp.concatenate([log_a, neg_inf])  # a of cell k goes to point k
    log_from_below = jnp.concatenate([neg_inf, log_b])  # b of cell k-1 goes to point k
    log_entry = jnp.logaddexp(log_to_k, log_from_below)
    log_entry = log_entry.at[0].set(jnp.logaddexp(log_entry[0], log_pm[0]))  # below the lattice: rounded up
    log_pmf = log_entry + jnp.log1p(16 * _U)  # the split's and the sums' rounding
    log_pmf = jax.lax.optimization_barrier(jnp.logaddexp(log_pmf, math.log(_TINY)))
    log_p_inf = jnp.logaddexp(log_pm[-1], math.log(_TINY))
    if top is not None:
        # points above ``top`` (the covered loss range) join the +inf atom: a far, heavily tilted
        # tail kept on the lattice would wrap around the FFT window into the bound
        beyond = ell > top
        log_p_inf = jnp.logaddexp(log_p_inf, jax.nn.logsumexp(jnp.where(beyond, log_pmf, _NEG)))
        log_pmf = jnp.where(beyond, _NEG, log_pmf)  # moved: exactly zero there
    log_p_inf = jnp.where(edges_ok, log_p_inf, 0.0)
    return _StepPmf(log_pmf, start, log_p_inf, index)
