"""Certified accountant: pessimistic privacy-loss distributions composed in the tilted domain.

Every number this module returns is a proven upper bound on delta(eps) (and the
epsilon it returns satisfies ``delta(epsilon) <= delta``), under the
floating-point model stated below.  It is tight: the only slack is the
second-order bias of the lattice discretisation and a few explicitly bounded
dropped masses, all well below 1e-3 relative on the DP-SGD settings of the
reference tables (see ``benchmarks/results/certified.md``).

Construction (per adjacency direction; Gaussian mechanisms and mixtures of
Gaussians with sensitivities ``c >= 0``, the Poisson-subsampled Gaussian
included):

1. **Pessimistic lattice PLD per step** ("connect the dots", Doroshenko, Ghazi,
   Kamath, Kumar & Manurangsi, PETS 2022).  The privacy loss ``L = log dP/dQ``
   is monotone in the output ``x``, so the preimage of a loss cell
   ``[l_k, l_k + D]`` is an interval of ``x`` and its masses ``P_k``, ``Q_k`` are
   sums of differences of normal CDFs (no sampling): on a narrow interval
   ``w phi(m) E`` with ``E`` a Hermite series in the width ``w`` (taken from
   the difference of the edges, exact, not of the rounded standardised ends),
   summed over the mixture's components in linear space relative to the
   largest term; on a wide one ``log_ndtr`` differences in log space.  The cell's
   ``P``-mass is split between its two end points, ``a_k`` at ``l_k`` and ``b_k``
   at ``l_k + D``, so that both ``P`` and ``Q = exp(-l) P`` masses are kept
   (``a_k + b_k = P_k``, ``a_k e^{-l_k} + b_k e^{-l_k - D} = Q_k``).
   *Why it dominates*: with ``u = exp(-L)``, ``delta_P||Q(eps) = E_P[(1 - e^eps u)_+]``
   and ``u -> (1 - e^eps u)_+`` is convex; the split is a mean-preserving spread
   of ``u`` under ``P`` within each cell, so by Jensen every hockey-stick
   divergence (every ``eps``, negative included) can only grow.  The discrete
   pair therefore dominates the mechanism in the sense of Zhu, Dong & Wang
   (AISTATS 2022, Def. 7), and dominating pairs compose (their Thm. 10), so the
   composition of the discrete pairs dominates the composed mechanism.  Mass
   below the lattice is moved up to its first point (rounding the loss up also
   dominates); mass above it is an atom at ``+inf`` (contributes its full
   ``P``-mass to delta: ``sum_i n_i p_inf,i`` bounds the chance that any step
   hits it).  The lattice covers the output range up to ``z`` noise standard
   deviations past the mechanism's means (fewer for a rare mixture component:
   ``z_i`` with ``p_i exp(-z_i^2 / 2) = exp(-z^2 / 2) / K``), ``z`` chosen so that
   the atoms add at most ``TAIL_FRACTION = 1e-8`` of the (estimated) delta.
2. **Tilted-domain composition.**  Each step's lattice pmf ``p`` is multiplied by
   ``exp(t l)`` (``t`` the saddle point of the target epsilon, from
   :mod:`jaxdp._saddlepoint`) and normalised; the composed tilted law is the
   inverse real FFT of ``prod_i rfft(p~_i)^{n_i}`` (powers in log-polar form),
   over a window of ``NUM_BINS`` lattice points from ``WINDOW_SDS_BELOW`` tilted
   standard deviations below its mean ``K'(t)`` (about the target epsilon) to
   ``WINDOW_SDS_ABOVE`` above it (or wider, when a step's own loss range needs
   a coarser lattice).  Each step's lattice is fine (``LATTICE_SIZE`` points)
   up to where its tilted law has shed all but ``FINE_TILTED_MASS / n`` of its
   mass and coarse above (``LATTICE_SIZE / COARSE_SHARE`` cells
   ``COARSE_FACTOR`` spacings wide; connect-the-dots on a cell whose ends are
   lattice points is as valid as on one spacing), up to the covered range;
   lattice points beyond that range join the ``+inf`` atom.  Untilting:
   ``delta_fin(eps) = exp(sum_i n_i log Z_i - t eps) sum_{l > eps} p~_n(l) e^{-t (l - eps)} (1 - e^{eps - l})``,
   in log space, so its relative accuracy survives at delta = 1e-15 and far below.
3. **Dropped mass, bounded.**  The FFT computes the composition *cyclically*:
   each window point receives the true mass plus the mass of all points that
   are a multiple of the window length away.  All of those are nonnegative,
   so the folded law is an upper bound on every point inside the window; only
   the mass *above* the window is lost, and it is bounded by the Chernoff bound
   ``P(L_n >= l_end) <= exp(sum_i n_i K_i(s) - s l_end)`` on the discrete pmf,
   minimised over a grid of ``s > t``, and added to delta (weight 1).  Mass
   below the window folds *up* into it: it is counted, at a larger loss than
   its own, so it only loosens the bound -- by a negligible amount, since it
   is a far tilted tail and lands where ``e^{-t (l - eps)}`` is small.  That is
   why the window can sit asymmetrically around the target (4 deviations
   below, 6 above) and the lattice be finer for the same ``NUM_BINS``.
4. **Floating point.**  The model: ``exp``, ``log``, ``log1p``, ``expm1`` and
   ``log_ndtr`` are accurate to a few ulp; the FFT obeys Higham's bound
   (*Accuracy and Stability of Numerical Algorithms*, Thm. 24.2)
   ``||fl(F x) - F x||_2 <= log2(N) eta ||F x||_2`` with ``eta = u + gamma_4 (sqrt 2 + u)``,
   taken 4x.  Then (a) the lattice pmf: each cell edge is solved for the loss
   ``l_k - eta_k`` (``eta_k`` a bound on the loss error of an edge) and its
   realised loss is *checked* to lie in ``[l_k - 2 eta_k, l_k]`` (if not, the
   step is all ``+inf`` atom: delta = 1, vacuous but valid), so every cell's
   losses lie in ``[l_k - 2 eta_k, l_{k+1}]``; the sliver below ``l_k`` is rounded
   up to it.  The split uses a *lower* bound on the cell's
   ``log E_P[e^{-(L - l_k)}]`` (its computed value less ``16 u (2 + |log P_k| + |log Q_k| + |l_k|)``
   and the sliver's ``2 eta_k``), and its share of the lower point is lowered by
   its own rounding: the pair used is the connect-the-dots pair with some mass
   moved *up* within cells, which only grows every hockey-stick divergence
   (stochastic order is kept by convolution and ``(1 - e^{eps - l})_+`` grows
   with ``l``).  The cells are those of the floating-point edges exactly: the
   rounding of each component's standardised ends and midpoint, the series and
   the sums make a relative error of each computed mass, bounded per cell by
   :func:`_interval_log_masses` (``64 u (K + 4 + |log P_k| + max |log p_i| + Z^2)``,
   ``Z`` the edge in deviations plus ``c_max / s`` and 2; ``K + 2`` times that
   for the log-space cells); ``P_k`` is inflated by its bound and ``Q_k``'s
   enters the lower bound on ``log E_P[e^{-(L - l_k)}]``.  Only the masses are
   inflated, relatively (that bound, ``8 u (2 + |log P_k|)`` for the
   inflation itself and ``16 u`` for the split), so the floating-point slack does not grow as
   the lattice gets finer (it used to be inflated by the split's error times
   ``1 / (1 - e^{-D})``, ~2e-6 relative in delta at 2,000 steps); (b) the errors of the forward FFT,
   the powers and the inverse FFT are bounded in the 2-norm, their sum ``B``
   bounds ``||e||_2`` for the error vector ``e`` of the window, and the
   untilting sum ``sum_r w_r y_r`` (weights ``w_r = e^{-t (l_r - eps)} (1 - e^{eps - l_r})``)
   gets ``||w||_2 B >= |sum_r w_r e_r|`` (Cauchy-Schwarz) -- not ``B sum_r w_r``,
   which is ~1/sqrt(spacing x tilt) times larger and dominated the bound of
   spike-and-slab laws (a few steps of a tiny q); (c) the tilting, the final
   exponent and the summation carry a relative factor.
   Subnormal underflow loses at most ``1e-300`` per entry (added).

``method="certified-fast"`` is the same construction with ``FAST_GRID``: a window
of 2^16 points and 2^14 lattice points per step.  Every bound above holds for
any grid size, so its numbers are proven upper bounds too, looser by the
coarser lattice's bias (4e-6 to 1e-4 relative in epsilon on the reference
rows, up to 0.2 % in delta) and about 6x faster.  Calibration uses it for its check.

epsilon(delta): the window is built once at the saddle point of the
saddle-point *estimate* of epsilon; on it ``delta_fin`` is ``e^G (A_r - e^eps B_r)``
between lattice points (``A``, ``B`` reverse cumulative log-sums), which gives
the root in closed form.  The candidate is then *verified* by the direct
formula (plus 1e-9 relative nudges if needed).

What is returned is the smallest of *verified* bounds only: the window's
(every candidate checked by the direct formula), the certified saddle-point
bound (itself re-checked at the epsilon it returns, vacuous where its
quadrature is unresolved, see :mod:`jaxdp._saddlepoint`) and, for a loss
bounded above (the add direction of a mixture with a zero-sensitivity
component, Laplace), the pure-DP bound ``delta(eps) <= 1 - e^{eps - L_max}``
(zero from ``L_max`` on).  Where all of them fail -- tiny noise, epsilon near
the add direction's largest loss -- the Rényi-DP bound (its orders checked the
same way) is the fallback.  A non-finite value anywhere is vacuous (epsilon =
inf, delta = 1), never a number.  ``docs/soundness.md`` has the arguments.

Gradients with respect to the noise multiplier and the sampling probability
flow through the lattice masses, the inversion of the loss (implicitly) and the
FFT, with the lattice (spacing, range, window) held fixed: they are the
derivatives of the bound of a fixed dominating lattice pair, within ~1e-4 of
finite differences of the returned bound (whose lattice moves with the
parameters).  "Log zero" is a large negative finite number and infinite cell
ends are clamped at 40 noise deviations (the mass beyond is below the 1e-300
added to every entry), so gradients stay finite.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.accountants import _cgf, _rdp, _saddlepoint
from jaxdp.accountants._registry import MethodInfo
from jaxdp.mechanisms import Composition, Gaussian, MixtureMechanism
from jaxdp.numerics import log1mexp, log_ndtr, log_sub_exp

__all__ = [
    "CertifiedResult",
    "certified_terms",
    "epsilon_certified",
    "log_delta_certified",
]

NUM_BINS = 2**19  # FFT window (lattice points of the composed law)
MIXTURE_NUM_BINS = 2**20  # the window for mixtures of more than two components (see _grid)
LATTICE_SIZE = 2**17  # lattice points per step (zero-padded, or folded, to the window)
FAST_GRID = (2**16, 2**14)  # (NUM_BINS, LATTICE_SIZE) of method="certified-fast": 8x coarser, ~6x faster (any mixture)
WINDOW_SDS_BELOW = 4.0  # the window starts this many tilted standard deviations below the tilted mean
WINDOW_SDS_ABOVE = 6.0  # and ends this many above it (narrower windows let heavy tilted tails wrap around)
Z_TAIL = 13.0  # default per-step output range, in noise standard deviations
TAIL_FRACTION = 1e-8  # the +inf atoms may add at most this fraction of the estimated delta
COARSE_FACTOR = 32  # above the fine lattice, LATTICE_SIZE / COARSE_SHARE cells 32 lattice spacings wide
COARSE_SHARE = 8
FINE_TILTED_MASS = 1e-2  # coarse cells may hold this much of the composed tilted law (see _fine_top)
NEWTON_MAX_ITER = 60
FALLBACK_TILT = 1.0  # a moderate tilt tried too when the first window fails
TILT_FACTORS = np.array([1.0, 1.5, 2.25, 3.4, 8.0, 16.0])  # retried tilts, times the saddle point of the root
REFINE_TOL = 5e-2  # re-centre the window when the root moved this far from the estimate

_U = 2.0**-53
_GL_X, _GL_W = np.polynomial.legendre.leggauss(6)
_GAMMA4 = 4 * _U / (1 - 4 * _U)


def _fft_rho(num_bins):
    """Higham's relative 2-norm bound of one FFT of ``num_bins`` points, taken 4x."""
    return 4.0 * math.log2(num_bins) * (_U + _GAMMA4 * (math.sqrt(2.0) + _U))


_TINY = 1e-300
_NEG = -1e5  # "log 0" that keeps gradients finite (exp underflows to exactly 0)
_X_FAR = 40.0  # outputs beyond 40 noise deviations carry P-mass < 1e-300 (counted as _TINY)
_CHERNOFF_STEPS = jnp.array([0.25, 1.0, 2.0, 4.0, 6.0, 16.0, 64.0])  # s - t, in 1 / (tilted deviation)
_CHERNOFF_ABS = jnp.array([16.0, 128.0, 1024.0, 8192.0])  # and absolute s (a few steps of a tiny q: bimodal laws)
_EPS_NUDGES = jnp.array([1e-12, 1e-9])


class CertifiedResult(NamedTuple):
    """Certified quantities for one epsilon and direction (logs of deltas).

    Attributes:
      tilt: the tilt ``t`` (saddle point of ``eps``).
      spacing: lattice spacing ``D``.
      log_delta: log of the certified delta from the tilted-FFT bound alone
        (0 when the window cannot certify ``eps``).
      log_delta_lattice: log of the lattice part (without the terms below).
      log_dropped: log of the dropped-mass terms (``+inf`` atom and the
        Chernoff bound above the window).
      log_fft_error: log of the 2-norm bound on the floating-point FFT error over the window.
      log_delta_upper: the smallest verified bound (what ``method="certified"`` returns; see
        :func:`log_delta_certified`).
    """

    tilt: jax.Array
    spacing: jax.Array
    log_delta: jax.Array
    log_delta_lattice: jax.Array
    log_dropped: jax.Array
    log_fft_error: jax.Array
    log_delta_upper: jax.Array


_UNROLL = 24  # mixtures with at most this many components are summed in one fused loop


def _mixture_of(mech):
    """``(log_p, c, s)`` of a mechanism whose dominating pair is a Gaussian mixture."""
    if isinstance(mech, Gaussian):
        s = jnp.asarray(mech.noise_multiplier, jnp.float64)
        return jnp.zeros(1), jnp.ones(1), s
    if isinstance(mech, MixtureMechanism):
        return mech.mixture()
    raise NotImplementedError(
        f"method='certified' supports Gaussian and mixture-of-Gaussians mechanisms "
        f"(Poisson-subsampled Gaussian included), not {type(mech).__name__}; "
        "use method='saddlepoint-certified' or 'rdp' for it."
    )


def _scaled_exps(es):
    """``(r, [exp(e - r) for e in es])`` with ``r`` the elementwise largest of ``es`` (no gradient; 0 where none is
    finite): the shared step of the unrolled sums over mixture components."""
    r = es[0]
    for e in es[1:]:
        r = jnp.maximum(r, e)
    r = jax.lax.stop_gradient(jnp.where(jnp.isfinite(r), r, 0.0))
    return r, [jnp.exp(e - r) for e in es]


def _mixture_terms(x, log_p, c, s2, slope=False):
    """``log sum_i exp(e_i)``, ``e_i = log p_i + (c_i x - c_i^2 / 2) / s^2``; with ``slope`` its derivative too.

    Unrolled over the components for small mixtures and many points (one fused loop over ``x``), else a
    reduction over a trailing axis.
    """
    k = log_p.shape[0]
    # (not for a few points: XLA fuses an unrolled scalar chain into every large loop that uses it)
    if k <= _UNROLL and jnp.size(x) > _START_GRID:
        r, ws = _scaled_exps([log_p[i] + (c[i] * x - 0.5 * c[i] * c[i]) / s2 for i in range(k)])
        total = sum(ws)
        lse = r + jnp.log(total)
        if not slope:
            return lse
        return lse, sum(wi * c[i] for i, wi in enumerate(ws)) / (total * s2)
    e = log_p + (c * x[..., None] - 0.5 * c * c) / s2
    lse = jax.nn.logsumexp(e, axis=-1)
    if not slope:
        return lse
    return lse, jnp.sum(jnp.exp(e - lse[..., None]) * c, axis=-1) / s2


def _log_ratio(x, log_p, c, s):
    """``M(x) = log sum_i p_i exp((c_i x - c_i^2 / 2) / s^2)`` (vectorised over x)."""
    return _mixture_terms(x, log_p, c, s * s)


_START_GRID = 1024  # coarse grid of Newton starting points for the inverse of the log ratio
_HERMITE_ORDER = 20  # series order for w max(1, |m|) <= _NARROW (first omitted term < 1e-20)
_NARROW = 0.5
_FAST_ORDER = 10  # the same for the linear-space sum of the cells, w max(1, |m|) <= _FAST_NARROW
_FAST_NARROW = 0.125
_BAD_CELLS = 1024  # cells computed in log space (a component is wide there) without the full fallback


def _mean_factor(m, w, order=_HERMITE_ORDER):
    """``E - 1`` with ``Phi(m + w/2) - Phi(m - w/2) = w phi(m) E`` for ``w max(1, |m|)`` small.

    ``phi(m + s) / phi(m) = sum_k He_k(m) (-s)^k / k!``; averaging over ``|s| <= w/2``
    keeps the even terms ``He_k(m) (w/2)^k / ((k + 1) k!)``.  With
    ``|He_k(m)| <= 2^{k/2} (|m|^k + sqrt(k!))`` the first omitted term is below
    ``(theta / sqrt 2)^k (1 / k! + 1 / sqrt(k!))`` for ``w max(1, |m|) <= theta``:
    ``4e-21`` for order 20 and ``theta = 1/2``, ``1e-17`` for order 10 and ``theta = 1/8``.
    """
    he_prev, he = jnp.ones_like(m), m  # He_0, He_1
    x2 = (0.5 * w) ** 2
    power = jnp.ones_like(m)
    total = jnp.zeros_like(m)
    for k in range(1, order):
        he_prev, he = he, m * he - k * he_prev  # He_{k+1}
        if (k + 1) % 2 == 0:
            power = power * x2  # (w/2)^{k+1}
            total = total + he * (power / float((k + 2) * math.factorial(k + 1)))
    return total


def _log_interval(a, b, w, m):
    """``log(Phi(b) - Phi(a))`` given also the width ``w`` and midpoint ``m`` (each computed as accurately as
    the caller can: a narrow interval's mass is ``w phi(m) E``, so ``w`` must not come from ``b - a`` when
    ``a`` and ``b`` are rounded values of larger numbers)."""
    empty = ~(w > 0) | ~(b > a)
    a = jnp.where(empty, 0.0, a)
    b = jnp.where(empty, 1.0, b)
    w = jnp.where(empty, 1.0, w)
    m = jnp.where(empty, 0.5, m)
    both_inf = jnp.isinf(a) & jnp.isinf(b)
    flip = jnp.where(both_inf, False, m > 0)
    a, b = jnp.where(flip, -b, a), jnp.where(flip, -a, b)
    narrow = jnp.isfinite(w) & (w * jnp.maximum(1.0, jnp.abs(m)) <= _NARROW)
    w_n = jnp.where(narrow, w, 1.0)
    m_n = jnp.where(narrow, m, 0.0)
    narrow_val = -0.5 * m_n * m_n - 0.5 * math.log(2.0 * math.pi) + jnp.log(w_n) + jnp.log1p(_mean_factor(m_n, w_n))
    a_w = jnp.where(narrow, -1.0, a)
    b_w = jnp.where(narrow, 0.0, b)
    lb = log_ndtr(b_w)
    wide_val = lb + log1mexp(jnp.minimum(log_ndtr(a_w) - lb, 0.0))
    out = jnp.where(narrow, narrow_val, wide_val)
    return jnp.where(empty, -jnp.inf, out)


def log_normal_interval(lo, hi):
    """``log(Phi(hi) - Phi(lo))`` elementwise for ``lo <= hi`` (infinite ends allowed), a few ulp relative.

    Reflected so that the midpoint is ``<= 0``.  Narrow intervals
    (``width x max(1, |mid|) <= 1/2``) use the Hermite series of
    :func:`_mean_factor`; wide ones ``log Phi(b) + log(1 - Phi(a) / Phi(b))``.
    """
    lo = jnp.asarray(lo, jnp.float64)
    hi = jnp.asarray(hi, jnp.float64)
    finite = jnp.isfinite(lo) & jnp.isfinite(hi)
    w = jnp.where(finite, hi - lo, jnp.inf)
    m = jnp.where(finite, 0.5 * (lo + hi), jnp.where(jnp.isinf(lo) & jnp.isinf(hi), 0.0, lo + hi))
    return _log_interval(lo, hi, w, m)


def _log_interval_x(xa, xb, c, s):
    """``log N(c, s^2)([xa, xb])``: width from ``xb - xa`` (exact for adjacent edges), ends rounded separately."""
    return _log_interval((xa - c) / s, (xb - c) / s, (xb - xa) / s, (0.5 * (xa + xb) - c) / s)


def _inverse_log_ratio(m, log_p, c, s):
    """``x`` with ``M(x) = m`` (``-inf`` where ``m <= log p_0``), Newton from the right.

    With ``p_0`` the mass of the ``c = 0`` components, solves
    ``log S(x) = log(e^m - p_0)`` for ``S`` the sum over ``c > 0``: convex and
    increasing, so Newton started where ``S`` already exceeds the target (the
    largest single term alone does) decreases monotonically to the root.
    Implicitly differentiated (one Newton step with gradients at the root).
    """
    pos = c > 0
    log_p = jnp.maximum(log_p, _NEG)
    log_p0 = jax.nn.logsumexp(jnp.where(pos, _NEG, log_p))
    log_pp = jnp.where(pos, log_p, _NEG)
    above = m > log_p0 + 1e-12
    m_safe = jnp.where(above, m, log_p0 + 1.0)
    tau = jnp.where(above, m_safe + log1mexp(jnp.minimum(log_p0 - m_safe, 0.0)), 0.0)
    c_safe = jnp.where(pos, c, 1.0)
    s2 = s * s

    def newton_step(x, tau, log_pp, c, s2):
        lse, slope = _mixture_terms(x, log_pp, c, s2, slope=True)
        return (lse - tau) / slope, slope

    usable = pos & (log_p > _NEG)
    starts = jnp.where(usable, (s2 * (tau[..., None] - log_p) + 0.5 * c * c) / c_safe, jnp.inf)
    x0 = jnp.min(starts, axis=-1)
    # a closer start, still right of the root: one Newton step from the first point of a coarse
    # grid where log S already exceeds the target (the tangent of a convex function lies below it)
    xg = jnp.linspace(-_X_FAR * s, jnp.max(c) + _X_FAR * s, _START_GRID)
    eg = log_pp + (c * xg[:, None] - 0.5 * c * c) / s2
    lg = jax.nn.logsumexp(eg, axis=-1)
    slope_g = jnp.sum(jnp.exp(eg - lg[:, None]) * c, axis=-1) / s2
    j = jnp.clip(jnp.searchsorted(lg, tau), 0, _START_GRID - 1)
    x_t = xg[j] - (lg[j] - tau) / slope_g[j]
    x0 = jnp.where((lg[j] >= tau) & jnp.isfinite(x_t), jnp.minimum(x0, x_t), x0)
    x0 = jax.lax.stop_gradient(x0)
    consts = jax.lax.stop_gradient((tau, log_pp, c, s2))

    def cond(state):
        i, _, step = state
        return (i < NEWTON_MAX_ITER) & (step > 0)

    def body(state):
        i, x, _ = state
        dx, slope = newton_step(x, *consts)
        # converged: the step is within the rounding of x and of the residual (|lse| ~ |tau|)
        noise = 4 * _U * (1.0 + jnp.abs(x)) + 8 * _U * (2.0 + jnp.abs(consts[0])) / slope
        dx = jnp.where(jnp.abs(dx) <= noise, 0.0, dx)
        return i + 1, x - dx, jnp.max(jnp.abs(dx))

    _, x_star, _ = jax.lax.while_loop(cond, body, (0, x0, jnp.float64(1.0)))
    x_star = jax.lax.stop_gradient(x_star)
    # one Newton step with gradients at the root: the implicit derivative
    step, _ = newton_step(x_star, tau, log_pp, c, s2)
    x = x_star - step + jax.lax.stop_gradient(step)
    return jax.lax.optimization_barrier(jnp.where(above, x, -jnp.inf))


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
    if direction == "remove":
        # P is the mixture: component i is covered to z_i deviations with p_i exp(-z_i^2 / 2) = exp(-z^2 / 2) / K,
        # so the P-mass above is at most exp(-z^2 / 2) (rarer components need fewer deviations)
        k = log_p.shape[0]
        z_i = jnp.sqrt(jnp.maximum(z * z + 2.0 * (jnp.maximum(log_p, _NEG) + math.log(k)), 0.0))
        xs = jnp.stack([-z * s, jnp.max(c + z_i * s)])
        lo, hi = _log_ratio(xs, log_p, c, s)
        return lo, hi
    xs = jnp.stack([z * s, -z * s])
    lo, hi = -_log_ratio(xs, log_p, c, s)
    return lo, hi


def _exact_log_masses(xa, xb, log_p, c, s):
    """Log masses of ``[xa, xb]`` under the mixture and under ``N(0, s^2)``, component by component in log space."""

    def body(acc, comp):
        lp, ci = comp
        return jnp.logaddexp(acc, lp + jnp.maximum(_log_interval_x(xa, xb, ci, s), _NEG)), None

    mix, _ = jax.lax.scan(body, jnp.full(xa.shape, _NEG), (jnp.maximum(log_p, _NEG), c))
    return mix, jnp.maximum(_log_interval_x(xa, xb, 0.0, s), _NEG)


def _linear_mixture_sum(factor, x, lp, c, inv_s):
    """``(R, S)`` with ``sum_i exp(lp_i - m_i^2 / 2) factor(m_i) = e^R S``, ``m_i = (x - c_i) / s``, ``R`` the largest
    exponent (no gradient).  Unrolled over the components (XLA fuses it into one loop over ``x``, ~6x faster than
    a reduction over a (components, points) array); an online rescaled scan for large mixtures."""
    k = lp.shape[0]
    if k <= _UNROLL:
        ms = [(x - c[i]) * inv_s for i in range(k)]
        r, ws = _scaled_exps([lp[i] - 0.5 * ms[i] * ms[i] for i in range(k)])
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


def _interval_log_masses(edges, log_p, c, s):
    """Log masses between consecutive ``edges`` under the mixture and under ``N(0, s^2)``, with error bounds.

    Returns ``(log_mix, log_gauss, err_mix, err_gauss)``, the error bounds on the
    *relative* error of each mass.  The cells are those of the floating-point
    edges exactly: a cell's width comes from ``xb - xa`` (exact for adjacent
    edges, Sterbenz) and its mass is ``w phi(m) E`` (Hermite series of
    :func:`_mean_factor`); rounding the midpoint ``m`` or, for a wide interval,
    the ends ``(x - c) / s`` of each component is a relative error of the mass
    below ``~40 u Z^2`` (``Z`` the larger end in deviations, plus ``c_max / s``
    and 2), and ``log_ndtr``'s few ulp are ``u Z^2`` too.  Where every component
    is narrow (``w max(1, |m|) <= 1/8``: all but a few hundred cells at the ends)
    the mixture is summed in linear space, ``e^R sum_i e^{log p_i - m_i^2 / 2 - R} E_i``
    with ``R`` the largest exponent: one logarithm per cell instead of one
    ``log`` and one ``logaddexp`` per component.  The other cells (up to
    ``_BAD_CELLS``, else all of them) are summed in log space.
    """
    k = log_p.shape[0]
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
    r, scaled = _linear_mixture_sum(lambda mi: 1.0 + _mean_factor(mi, w_g, _FAST_ORDER), xm_g, lp, c, inv_s)
    log_w = jnp.log(w_g) - 0.5 * math.log(2.0 * math.pi)
    mix = jnp.where(empty, _NEG, r + jnp.log(scaled) + log_w)
    gauss = jnp.where(empty, _NEG, -0.5 * m0_g * m0_g + jnp.log1p(_mean_factor(m0_g, w_g, _FAST_ORDER)) + log_w)

    def gathered(mix, gauss):
        idx = jnp.nonzero(bad, size=_BAD_CELLS, fill_value=bad.shape[0])[0]
        mix_b, gauss_b = _exact_log_masses(jnp.take(xa, idx, mode="clip"), jnp.take(xb, idx, mode="clip"), log_p, c, s)
        return mix.at[idx].set(mix_b, mode="drop"), gauss.at[idx].set(gauss_b, mode="drop")

    def everywhere(mix, gauss):
        mix_e, gauss_e = _exact_log_masses(xa, xb, log_p, c, s)
        return jnp.where(bad, mix_e, mix), jnp.where(bad, gauss_e, gauss)

    mix, gauss = jax.lax.cond(jnp.sum(bad) <= _BAD_CELLS, gathered, everywhere, mix, gauss)
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
    their tilted laws are wide, and a window of ``NUM_BINS`` would set a lattice spacing above 1e-4.
    """
    if grid is not None:
        return grid
    wide = any(_mixture_of(m)[0].shape[0] > 2 for m in comp.mechanisms)
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
    sign = 1.0 if direction == "remove" else -1.0
    # loss error of a computed edge (logsumexp of terms of size |log p| + (c |x| + c^2) / s^2)
    eta = 16 * _U * (4.0 + jnp.abs(ell) + lp_max + 2.0 * (c_max * (c_max + _X_FAR * s) + c_max * c_max) / s2)
    x_raw = _inverse_log_ratio(sign * (ell - eta), log_p, c, s)  # remove: increasing; add: decreasing
    x = _clamp_edges(x_raw, c, s)
    realised = sign * _log_ratio(jax.lax.stop_gradient(x), log_p, c, s)
    rho = 8 * _U * (4.0 + jnp.abs(realised) + lp_max + (c_max * jnp.abs(x) + c_max * c_max) / s2)
    interior = jax.lax.stop_gradient(jnp.isfinite(x_raw) & (x_raw == x))
    edges_ok = jnp.all(jnp.where(interior, (realised <= ell - rho) & (realised >= ell - 2.0 * eta + rho), True))
    if direction == "remove":
        edges = jnp.concatenate([(-_X_FAR * s)[None], x, (c_max + _X_FAR * s)[None]])
        log_pm, log_qm, err_pm, err_qm = _interval_log_masses(edges, log_p, c, s)
    else:
        edges = jnp.concatenate([(-_X_FAR * s)[None], x[::-1], (c_max + _X_FAR * s)[None]])
        log_qm, log_pm, err_qm, err_pm = _interval_log_masses(edges, log_p, c, s)
        log_pm, log_qm, err_pm, err_qm = log_pm[::-1], log_qm[::-1], err_pm[::-1], err_qm[::-1]
    # interval j = 0: below the lattice; j = 1..K-1: cell [l_{j-1}, l_j]; j = K: above.
    # P-masses inflated by their relative error bound (and the rounding of doing so)
    log_pm = log_pm - jnp.log1p(-err_pm) + jnp.log1p(8 * _U * (2.0 + jnp.abs(log_pm)))
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
    lr = jnp.clip(jnp.where(cells_p > _NEG, cells_q - cells_p + left - err_lr, 0.0), -width, 0.0)
    # share of the lower point, f = (e^lr - e^-w) / (1 - e^-w) (w the cell width), lowered by its rounding
    xa = lr + width
    f = jnp.where(xa > 0, jnp.expm1(jnp.where(xa > 0, xa, 1.0)) / jnp.expm1(width), 0.0)
    f = jnp.clip(f - 8 * _U * (1.0 + jnp.exp(width)), 0.0, 1.0)
    log_a = cells_p + jnp.where(f > 0, jnp.log(jnp.where(f > 0, f, 1.0)), _NEG)
    log_b = cells_p + jnp.where(f < 1, jnp.log1p(-jnp.where(f < 1, f, 0.0)), _NEG)
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
    if direction != "remove":
        return jnp.inf
    tt = jnp.maximum(t, 0.0)
    ok = log_p > _NEG
    log_w = jnp.where(ok, (1.0 + tt) * log_p + tt * (1.0 + tt) * c * c / (2.0 * s * s), _NEG)
    z2 = 2.0 * (log_w - jax.nn.logsumexp(log_w) - math.log(FINE_TILTED_MASS) + jnp.log(n_total))
    x = jnp.max(jnp.where(ok & (z2 > 0), (1.0 + tt) * c + jnp.sqrt(jnp.maximum(z2, 0.0)) * s, -jnp.inf))
    x = jnp.where(jnp.isfinite(x), x, jnp.max(c) + _X_FAR * s)  # (the heaviest bump always qualifies)
    return _log_ratio(x[None], log_p, c, s)[0]


def _parts(comp: Composition):
    return [(m, jnp.asarray(n, jnp.float64)) for m, n in zip(comp.mechanisms, comp.counts)]


def _tail_z(comp: Composition, log_delta_est):
    """Output range (in noise deviations) so that ``sum_i n_i p_inf,i <= TAIL_FRACTION x delta``.

    Every step's ``P``-mass beyond ``z`` deviations is at most ``Phi(-z) <= exp(-z^2 / 2) / 2``.
    Only tightness depends on this choice: the +inf atoms are counted in full.
    """
    n_total = sum(jnp.asarray(n, jnp.float64) for n in comp.counts)
    log_tau = log_delta_est + math.log(TAIL_FRACTION) - jnp.log(n_total)
    return jnp.clip(jnp.sqrt(2.0 * jnp.maximum(-log_tau, 0.0)), 3.0, 40.0)


def _build_window(comp: Composition, direction: str, t, log_delta_est, grid=None) -> _Window:
    """The tilted composed lattice law on a window around its mean (module docstring)."""
    num_bins, lattice_size = _grid(grid, comp)
    fft_rho = _fft_rho(num_bins)
    t = jax.lax.stop_gradient(t)
    z = jax.lax.stop_gradient(_tail_z(comp, log_delta_est))
    parts = _parts(comp)
    _, k1, k2 = jax.lax.stop_gradient(_cgf.k012(comp, direction, t))
    sd = jnp.sqrt(jnp.maximum(k2, 1e-300))
    ranges = [jax.lax.stop_gradient(_loss_range(*_mixture_of(m), direction, z)) for m, _ in parts]
    # the fine lattice covers the tilted law (see _fine_top); above it, up to the range of z, cells
    # may be COARSE_FACTOR wide
    n_total = sum(n for _, n in parts)
    fine_tops = [
        jnp.minimum(jax.lax.stop_gradient(_fine_top(*_mixture_of(m), direction, t, n_total)), hi)
        for (m, _), (_, hi) in zip(parts, ranges)
    ]
    coarse_size = lattice_size // COARSE_SHARE
    reach = lattice_size - 1 + COARSE_FACTOR * coarse_size  # index of the last lattice point
    offset = sum(n * lo for (_, n), (lo, _) in zip(parts, ranges))  # loss of composed index 0
    support = sum(n * (hi - lo) for (_, n), (lo, hi) in zip(parts, ranges))  # composed lattice range
    # the window spans WINDOW_SDS_BELOW + WINDOW_SDS_ABOVE tilted deviations, never more than the support
    spacing = jnp.minimum((WINDOW_SDS_BELOW + WINDOW_SDS_ABOVE) * sd, support) / num_bins
    for (lo, hi), top in zip(ranges, fine_tops):
        spacing = jnp.maximum(spacing, jnp.maximum((hi - lo) / reach, (top - lo) / (lattice_size - 1)))
    spacing = jnp.maximum(spacing, 1e-300)
    width = num_bins * spacing
    start = jnp.clip(k1 - WINDOW_SDS_BELOW * sd, offset, jnp.maximum(offset + support - width, offset))
    j0 = jnp.floor((start - offset) / spacing)
    ell_start = offset + j0 * spacing
    ell_end = ell_start + num_bins * spacing

    log_spec = 0.0
    log_scale = 0.0
    log_inf = _NEG
    rel = 0.0
    fft_terms = 0.0
    sum_bound = 0.0
    log_chernoff = 0.0
    pow_terms = 0.0
    s_grid = jnp.concatenate([t + _CHERNOFF_STEPS / sd, _CHERNOFF_ABS])  # any s >= 0 gives a valid bound
    for (mech, n), (lo, hi) in zip(parts, ranges):
        # entries summed into one window point: the folds of the fine part, plus the coarse points
        fold = (lattice_size // num_bins if lattice_size >= num_bins else 1) + -(-reach // num_bins)
        pmf = _step_pmf(mech, direction, lo, spacing, lattice_size, coarse_size, hi + spacing)
        kd = pmf.index * spacing
        tilted = pmf.log_pmf + t * kd
        log_z = jax.nn.logsumexp(tilted)
        v_all = jnp.exp(tilted - log_z)
        v = v_all[:lattice_size]
        if lattice_size >= num_bins:
            v = v.reshape(lattice_size // num_bins, num_bins).sum(axis=0)
        else:
            v = jnp.zeros(num_bins).at[:lattice_size].set(v)
        coarse_at = np.mod(_lattice_index(lattice_size, coarse_size)[lattice_size:], num_bins).astype(np.int64)
        v = v.at[coarse_at].add(v_all[lattice_size:])
        rel = rel + n * 8 * _U * (jnp.max(jnp.abs(t * kd)) + jnp.abs(log_z) + 4.0 + fold)
        total = jnp.sum(v)
        norm2 = jnp.sqrt(jnp.sum(v * v))
        spec = jnp.fft.rfft(v)
        log_abs = jnp.log(jnp.abs(spec))
        log_spec = log_spec + n * jnp.log(spec.astype(jnp.complex128))
        fft_terms = fft_terms + n * fft_rho * norm2
        sum_bound = sum_bound + n * jnp.log(total + fft_rho * math.sqrt(num_bins) * norm2)
        log_scale = log_scale + n * (log_z + t * lo)
        log_inf = jnp.logaddexp(log_inf, jnp.log(n) + pmf.log_p_inf)
        # Chernoff on the (untilted, inflated) lattice measure: sum_i n_i K_i(s)
        k_s = jax.nn.logsumexp(pmf.log_pmf[None, :] + s_grid[:, None] * (lo + kd)[None, :], axis=1)
        log_chernoff = log_chernoff + n * k_s
        pow_err = n * (jnp.abs(jnp.where(jnp.isfinite(log_abs), log_abs, 0.0)) + math.pi + 1.0)
        pow_terms = pow_terms + pow_err
    z = jnp.exp(log_spec)
    y = jnp.fft.irfft(z, n=num_bins)
    growth = jnp.maximum(1.0, jnp.exp(sum_bound))
    pow_abs = 8 * _U * (pow_terms + 2.0) * jnp.abs(z)
    bound = (
        growth * fft_terms
        + math.sqrt(2.0) * jnp.sqrt(jnp.sum(pow_abs * pow_abs)) / math.sqrt(num_bins)
        + 1.01 * fft_rho * jnp.sqrt(jnp.sum(y * y))
    )
    bound = 1.01 * bound + _TINY
    shift = jnp.mod(j0, num_bins).astype(jnp.int64)
    y = jnp.roll(y, -shift)
    log_y = jnp.log(jnp.maximum(y, _TINY))
    log_tail = jnp.min(log_chernoff - s_grid * ell_end)
    log_rest = jnp.logaddexp(log_inf, log_tail)
    return _Window(log_y, ell_start, spacing, t, log_scale, log_rest, jnp.log1p(rel), jnp.log(bound))


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


def certified_terms(comp: Composition, direction: str, epsilon, grid=None) -> CertifiedResult:
    """Certified delta at ``epsilon`` with its pieces (one direction; ``grid``: ``(NUM_BINS, LATTICE_SIZE)``)."""
    epsilon = jnp.asarray(epsilon, jnp.float64)
    sp = _saddlepoint.saddlepoint_terms(comp, direction, epsilon)
    win = _build_window(comp, direction, sp.saddle_point, sp.log_delta, grid)
    log_delta, log_fin = _window_log_delta(win, epsilon)
    log_delta = jnp.where(jnp.isnan(log_delta), 0.0, log_delta)
    best = jnp.minimum(log_delta, sp.log_delta_upper)  # (the latter includes the pure-DP bound)
    best = jnp.where(jnp.isnan(best), 0.0, best)
    upper = jax.lax.cond(
        best < 0.0,
        lambda b: b,
        lambda b: jnp.minimum(b, _checked(_rdp.log_delta_rdp(comp, direction, epsilon), 0.0)),
        best,
    )
    return CertifiedResult(sp.saddle_point, win.spacing, log_delta, log_fin, win.log_rest, win.log_fft_error, upper)


def _checked(x, vacuous):
    """``x`` where it is a number (not NaN), else the vacuous value."""
    return jnp.where(jnp.isnan(x), vacuous, x)


def _pure_dp_epsilon(comp, direction):
    """``L_max`` of the composition (``+inf`` if unbounded): delta is 0 there."""
    return jax.lax.stop_gradient(comp.max_privacy_loss(direction))


def log_delta_certified(comp, direction, epsilon, grid=None):
    """Certified upper bound on ``log delta(eps)``."""
    return certified_terms(comp, direction, epsilon, grid).log_delta_upper


def _window_epsilon(win: _Window, log_delta, eps_guess):
    """Smallest verified eps on the window with certified delta <= target (``inf`` if none).

    Between lattice points ``delta_fin(eps) = e^G (A_r - e^eps B_r)`` (before the
    FFT term) with ``A_r = sum_{l > l_r} y e^{-t l}`` and
    ``B_r = sum_{l > l_r} y e^{-(t+1) l}`` (reverse cumulative sums, scaled at the
    guess to stay in range), which gives the root in closed form.  The FFT term
    ``e^{G - t eps} ||w(eps)||_2 ||e||_2`` decreases with ``eps``, so solving
    again with the target lowered by its value at the first root gives a root
    where the sum of both is below the target.  The candidate is then checked
    with the direct formula of :func:`_window_log_delta`.
    """
    num_bins = win.log_y.shape[-1]
    r = jnp.arange(num_bins, dtype=jnp.float64)
    ell = win.ell_start + r * win.spacing
    ok_rest = win.log_rest < log_delta
    log_target = log_sub_exp(log_delta, jnp.minimum(win.log_rest, log_delta))
    log_target = log_target - win.log_rel - jnp.log1p(4 * _U * num_bins) - win.log_scale
    ref = jnp.clip(eps_guess, ell[0], ell[-1])
    # scaled so the terms at the guess are ~y: A e^{t ref}, B e^{(t + 1) ref}
    ua = jnp.exp(jnp.minimum(win.log_y - win.tilt * (ell - ref), 700.0))
    ub = jnp.exp(jnp.minimum(win.log_y - (win.tilt + 1.0) * (ell - ref), 700.0))
    ca = jnp.cumsum(ua[::-1])[::-1]
    cb = jnp.cumsum(ub[::-1])[::-1]
    zero = jnp.zeros(1)
    a1 = jnp.concatenate([ca[1:], zero])  # sums over r' > r
    b1 = jnp.concatenate([cb[1:], zero])
    # delta_fin / e^G at eps = l_r, scaled by e^{t ref}: a1 - e^{l_r - ref} b1
    log_d = jnp.log(jnp.maximum(a1 - jnp.exp(ell - ref) * b1, 1e-300))

    def root(log_target):
        log_t_scaled = log_target + win.tilt * ref
        count = jnp.sum(log_d >= log_t_scaled)
        found = ok_rest & (count >= 1) & (count <= num_bins - 2)
        r_star = jnp.clip(count - 1, 0, num_bins - 2)
        la = jnp.log(jnp.maximum(a1[r_star], 1e-300))
        lb = jnp.log(jnp.maximum(b1[r_star], 1e-300))
        gap_ok = found & (log_t_scaled < la - 1e-12)
        lt = jnp.where(gap_ok, log_t_scaled, la - 1.0)
        eps = ref + log_sub_exp(la, lt) - lb
        return jnp.clip(eps, ell[r_star], ell[r_star + 1]), found

    eps0, found0 = root(log_target)
    log_fft0 = -win.tilt * eps0 + _log_fft_term(win, _log_weights(win, eps0))
    lowered = found0 & (log_fft0 < log_target)
    eps, found = root(jnp.where(lowered, log_sub_exp(log_target, jnp.minimum(log_fft0, log_target)), log_target))
    found = found & lowered
    cands = eps + _EPS_NUDGES * (1.0 + jnp.abs(eps))
    # eps = 0 first: the bound may already hold there (then the solve has no root)
    cands = jnp.concatenate([jnp.zeros(1), cands])
    log_ds, _ = _window_log_delta(win, cands)
    passed = log_ds <= log_delta
    first = jnp.argmax(passed)
    ok = passed[0] | (jnp.any(passed) & found)
    return jnp.where(ok, cands[first], jnp.inf)


def epsilon_certified(comp, direction, log_delta, grid=None):
    """Certified epsilon: the certified delta at it is at most ``exp(log_delta)``.

    The window is tilted at the saddle point of the saddle-point estimate of
    epsilon.  Where that fails, or the root lands more than ``REFINE_TOL``
    (relative) away from the estimate -- a few steps with a tiny sampling rate,
    whose bimodal "spike and slab" law the continuous saddle point places
    poorly -- the window is rebuilt at ``TILT_FACTORS`` times the saddle point of
    the root and at ``FALLBACK_TILT``, and solved again.  Every candidate is a
    verified upper bound, so the smallest is returned.
    """

    def solve(t, eps_ref):
        win = _build_window(comp, direction, t, log_delta, grid)
        return _window_epsilon(win, log_delta, eps_ref)

    def search(eps_ref):
        # the tilts are compared without gradients (a failed one may have non-finite partials);
        # the best is solved again, differentiably
        t_ref = jax.lax.stop_gradient(_cgf.saddle_point(comp, direction, eps_ref))
        tilts = jnp.concatenate([t_ref * TILT_FACTORS, jnp.array([FALLBACK_TILT])])
        frozen = jax.lax.stop_gradient(comp)
        scan_grid = FAST_GRID if grid is None else grid  # the tilts are ranked on the coarse lattice (~6x cheaper)
        eps = jax.lax.map(
            lambda t: _window_epsilon(_build_window(frozen, direction, t, log_delta, scan_grid), log_delta, eps_ref),
            tilts,
        )
        best = jnp.argmin(eps)
        return jnp.where(jnp.isfinite(eps[best]), solve(tilts[best], eps_ref), jnp.inf)

    def never(_):
        return jnp.asarray(jnp.inf, jnp.float64)

    eps_sp = _checked(_saddlepoint.epsilon_saddlepoint_upper(comp, direction, log_delta), jnp.inf)
    eps0 = jax.lax.stop_gradient(_saddlepoint.epsilon_saddlepoint(comp, direction, log_delta))
    eps0 = jnp.where(jnp.isfinite(eps0), eps0, jax.lax.stop_gradient(jnp.where(jnp.isfinite(eps_sp), eps_sp, 1.0)))
    eps1 = _checked(solve(_cgf.saddle_point(comp, direction, eps0), eps0), jnp.inf)
    best = jnp.minimum(eps1, eps_sp)
    ref = jax.lax.stop_gradient(jnp.where(jnp.isfinite(best), best, eps0))
    far = jnp.abs(ref - eps0) > REFINE_TOL * (jnp.abs(eps0) + 1e-3)
    eps2 = _checked(jax.lax.cond(far | ~jnp.isfinite(eps1), search, never, ref), jnp.inf)
    best = jnp.minimum(jnp.minimum(best, eps2), _pure_dp_epsilon(comp, direction))
    # every bound failed: the Rényi-DP bound (its orders checked), else vacuous
    best = jax.lax.cond(
        jnp.isfinite(best),
        lambda b: b,
        lambda b: _checked(_rdp.epsilon_rdp(comp, direction, log_delta), jnp.inf),
        best,
    )
    return jnp.maximum(best, 0.0)


def _supported(comp: Composition) -> bool:
    return all(isinstance(m, (Gaussian, MixtureMechanism)) for m in comp.mechanisms)


METHODS = (
    MethodInfo(
        "certified",
        certified=True,
        description="pessimistic lattice PLD composed by FFT in the tilted domain (proven upper bound, tight)",
        log_delta=log_delta_certified,
        epsilon=epsilon_certified,
        supports=_supported,
        screen="saddlepoint-certified",
        calibration_nudge=3e-6,
    ),
    MethodInfo(
        "certified-fast",
        certified=True,
        description="certified on an 8x coarser lattice (proven upper bound, ~1e-4 looser at most, ~6x faster)",
        log_delta=functools.partial(log_delta_certified, grid=FAST_GRID),
        epsilon=functools.partial(epsilon_certified, grid=FAST_GRID),
        supports=_supported,
        screen="saddlepoint-certified",
        calibration_nudge=3e-5,
    ),
)
