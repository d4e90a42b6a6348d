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

:class:`TiltedLowerBound` (below) is the *proven* lower value that the soundness checks use
(``_lower_bounds.lower_log_delta``): the optimistic discretisation of a post-processing of the mechanism, with
every rounding (cell masses, the FFT, the wrap-around, the window) charged on the side that lowers delta; its
docstring gives the argument.  (The bracket's lower end above drops the FFT's rounding and its wrap-around, so it
is an estimate, not a proof; its upper end drops the add direction's losses below -8 and above ``lmax``.)
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special
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


# -- a proven lower bound: merged output cells, losses rounded down -------------------------------------------------

_U = 2.0**-53  # unit roundoff of float64
_LOG_TAIL = -14.0  # windows hold all but ~e^-14 of delta's sum (sizing only: what falls outside is charged)


def _fft_rho(n):
    """Higham's bound for the radix-2 FFT, ``||fl(F x) - F x||_2 <= rho ||F x||_2``, taken 4x (the assumption the
    certified accountant makes for XLA's FFT; ``tests/test_soundness.py`` checks numpy's against long double)."""
    eta = _U + 4 * _U / (1 - 4 * _U) * (math.sqrt(2.0) + _U)
    return 4.0 * math.log2(n) * eta


def _log_sinhc_upper(y):
    """An upper bound on ``log(sinh(y) / y)``, ``y >= 0``: ``min(y^2 / 6, y - log 2y)``."""
    with np.errstate(divide="ignore"):
        return np.minimum(y * y / 6, np.where(y > 0, y - np.log(2 * np.maximum(y, 1e-300)), np.inf))


def _log_gauss_cell_bounds(z, shift):
    """Lower and upper bounds on ``log Phi-mass`` of the cells ``[z_j, z_{j+1})``, then ``[z_K, inf)`` and
    ``(-inf, z_0)``, of the standard normal, for ``z`` computed as ``(x - mu) / sigma`` (``shift = |mu| / sigma``).

    Two forms, the better of each side kept: the difference of the tails on the side without cancellation
    (``log_ndtr``, its error ``1e-14 (1 + |log Phi|)`` plus the rounding of ``z`` through ``|d log Phi / dz| <= |z|
    + 1``), and, free of cancellation however narrow the cell, ``h phi(m) e^{-h^2/24} <= mass <= h phi(m)
    sinh(|m| h / 2) / (|m| h / 2)`` for a cell of width ``h`` about ``m`` (Jensen on ``int e^{-mt - t^2/2}``, and
    ``e^{-t^2/2} <= 1``), its ends moved by their rounding.
    """
    dz = 2 * _U * (np.abs(z) + shift + 1)
    l_sf, l_cdf = special.log_ndtr(-z), special.log_ndtr(z)
    e_sf = 1e-14 * (1 + np.abs(l_sf)) + (np.abs(z) + 1) * dz * 1.01
    e_cdf = 1e-14 * (1 + np.abs(l_cdf)) + (np.abs(z) + 1) * dz * 1.01
    zl, zr = z[:-1], z[1:]
    right, left = zl >= 0, zr <= 0

    def diff(a, ea, b, eb):  # log(e^a - e^b), a > b, from below and from above
        with np.errstate(invalid="ignore", divide="ignore"):
            lo_gap, hi_gap = (b + eb) - (a - ea), (b - eb) - (a + ea)
            lo = np.where(lo_gap < 0, (a - ea) + np.log(-np.expm1(np.minimum(lo_gap, -1e-300))), -np.inf)
            hi = (a + ea) + np.log(-np.expm1(np.minimum(hi_gap, -1e-300)))
        return lo, hi

    r_lo, r_hi = diff(l_sf[:-1], e_sf[:-1], l_sf[1:], e_sf[1:])
    c_lo, c_hi = diff(l_cdf[1:], e_cdf[1:], l_cdf[:-1], e_cdf[:-1])
    with np.errstate(invalid="ignore", divide="ignore"):  # straddling cells: 1 - Phi(zl) - Phi(-zr)
        out_lo = np.logaddexp(l_cdf[:-1] + e_cdf[:-1], l_sf[1:] + e_sf[1:])
        out_hi = np.logaddexp(l_cdf[:-1] - e_cdf[:-1], l_sf[1:] - e_sf[1:])
        s_lo = np.where(out_lo < 0, np.log(-np.expm1(np.minimum(out_lo, -1e-300))), -np.inf)
        s_hi = np.log(-np.expm1(np.minimum(out_hi, -1e-300)))
    t_lo = np.where(right, r_lo, np.where(left, c_lo, s_lo))
    t_hi = np.where(right, r_hi, np.where(left, c_hi, s_hi))
    m = 0.5 * (zl + zr)
    dm = 0.5 * (dz[:-1] + dz[1:]) + 2 * _U * np.abs(m)
    log_phi = -0.5 * m * m - 0.5 * math.log(2 * math.pi)
    slack = np.abs(m) * dm + dm * dm + 8 * _U * (m * m + 4)
    h_lo = (zr - zl) * (1 - 4 * _U) - dz[:-1] - dz[1:]
    h_hi = (zr - zl) * (1 + 4 * _U) + dz[:-1] + dz[1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        j_lo = np.where(h_lo > 0, log_phi - slack + np.log(np.maximum(h_lo, 1e-300)) - h_lo * h_lo / 24, -np.inf)
        j_hi = log_phi + slack + np.log(h_hi) + _log_sinhc_upper((np.abs(m) + dm) * h_hi / 2)
    lo = np.concatenate([np.maximum(t_lo, j_lo), [l_sf[-1] - e_sf[-1]], [l_cdf[0] - e_cdf[0]]])
    hi = np.concatenate([np.minimum(t_hi, j_hi), [l_sf[-1] + e_sf[-1]], [l_cdf[0] + e_cdf[0]]])
    return np.nan_to_num(lo, nan=-np.inf), np.nan_to_num(hi, nan=np.inf)


class _Step:
    """One step of a Gaussian-mixture pair in one direction, in a coordinate where the privacy loss increases.

    remove: ``x ~ P = sum_m p_m N(c_m, s^2)`` against ``Q = N(0, s^2)``; add: ``x`` is the negated output,
    ``P = N(0, s^2)``, ``Q = sum_m p_m N(-c_m, s^2)``.  ``L = log dP/dQ`` is nondecreasing in ``x`` when every
    ``c_m >= 0``.
    """

    def __init__(self, sigma, c, p, direction):
        c, p = np.asarray(c, dtype=np.float64), np.asarray(p, dtype=np.float64)
        c, p = c[p > 0], p[p > 0]
        if np.any(c < 0) or not np.any(c > 0):
            raise ValueError("the lower-bound FFT needs sensitivities >= 0, one of them > 0")
        p = p / p.sum()  # as jaxdp renormalises
        self.sigma, self.c, self.logp = float(sigma), c, np.log(p)
        self.sgn = 1.0 if direction == "remove" else -1.0
        one, zero = np.ones(1), np.zeros(1)
        self.p_mix, self.q_mix = ((p, c), (one, zero)) if direction == "remove" else ((one, zero), (p, -c))
        self._tables = {}

    def _args(self, x):
        c = self.c[:, None]
        return self.logp[:, None] + (self.sgn * c * x[None, :] - 0.5 * c * c) / self.sigma**2

    def loss(self, x):
        return self.sgn * special.logsumexp(self._args(x), axis=0)

    def dloss(self, x):
        a = self._args(x)
        w = np.exp(a - a.max(axis=0))
        return (w * self.c[:, None]).sum(axis=0) / w.sum(axis=0) / self.sigma**2

    def _log_density(self, x):
        w, mu = self.p_mix
        z = (x[None, :] - mu[:, None]) / self.sigma
        norm = math.log(self.sigma * math.sqrt(2 * math.pi))
        return special.logsumexp(np.log(w)[:, None] - 0.5 * z * z, axis=0) - norm

    def table(self, t, n=2**13):
        """``(x, log weights, losses)`` of ``L`` under ``P`` tilted by ``e^{tL}`` on a grid over its bulk (all but
        ~e^-75).  For choosing tilts and windows only: nothing proven rests on it."""
        if t in self._tables:
            return self._tables[t]
        s, cmax = self.sigma, float(np.max(self.c))
        mus = np.concatenate([self.p_mix[1], self.q_mix[1]])
        lo, hi = float(mus.min()) - abs(t) * cmax - 40 * s - 1, float(mus.max()) + abs(t) * cmax + 40 * s + 1
        for _ in range(3):
            x = np.linspace(lo, hi, n)
            with np.errstate(over="ignore", invalid="ignore"):
                lw = self._log_density(x) + t * self.loss(x) + math.log(x[1] - x[0])
            lw = np.where(np.isfinite(lw), lw, -np.inf)
            ok = np.nonzero(lw >= lw.max() - 75)[0]
            i0, i1 = max(ok[0] - 1, 0), min(ok[-1] + 1, n - 1)
            if i1 - i0 > n // 4:
                break
            lo, hi = x[i0], x[i1]
        out = (x, lw, self.loss(x))
        if len(self._tables) > 128:
            self._tables.clear()
        self._tables[t] = out
        return out

    def moments(self, t):
        """``(log E_P e^{tL}, mean, variance)`` of the tilted loss (from :meth:`table`; approximate)."""
        _, lw, loss = self.table(t)
        top = lw.max()
        w = np.exp(lw - top)
        tot = w.sum()
        mean = float(np.sum(w * loss) / tot)
        return top + math.log(tot), mean, float(np.sum(w * (loss - mean) ** 2) / tot)

    def _invert(self, targets, xa, xb):
        """Approximately ``L^{-1}(targets)`` in ``[xa, xb]`` (interpolation, then three clipped Newton steps); its
        accuracy only moves the cells, whose losses are computed from their masses."""
        xt = np.linspace(xa, xb, 2**16)
        lt = np.maximum.accumulate(self.loss(xt))
        i = np.clip(np.searchsorted(lt, targets), 1, len(xt) - 1)
        lo, hi = xt[i - 1], xt[i]
        x = np.clip(np.interp(targets, lt, xt), lo, hi)
        for _ in range(3):
            d = self.dloss(x)
            with np.errstate(divide="ignore", invalid="ignore"):
                step = np.where(d > 0, (self.loss(x) - targets) / d, 0.0)
            x = np.clip(x - np.nan_to_num(step), lo, hi)
        return x

    def _log_mass_bounds(self, edges, mix, upper):
        w, mu = mix
        out = []
        for wm, mm in zip(w, mu):
            lo, hi = _log_gauss_cell_bounds((edges - mm) / self.sigma, abs(mm) / self.sigma)
            out.append(math.log(wm) + (hi if upper else lo))
        tot = special.logsumexp(np.stack(out), axis=0)
        return tot + (1 if upper else -1) * 16 * _U * (4 + np.abs(tot))

    def cells(self, s, dx, theta=0.01, n_coarse=4096, q_tail=1e-10, max_cells=1_000_000):
        """One step, post-processed to a finite partition of its outputs, each cell's loss rounded down to the grid
        ``dx Z``, tilted by ``e^{sL}``: ``(grid indices, weights w summing to <= 1, log M)`` such that ``M w_j <=
        P(cell_j) e^{s idx_j dx}`` and ``idx_j dx <= log(P(cell_j) / Q(cell_j))``.

        The cuts sit where ``L`` is ``(k - 1/2 + theta) dx``, ``dx`` apart over the tilted law's bulk (all but
        ``q_tail`` at each end) and coarser outside, so that a cell's loss ``log(P(cell) / Q(cell))`` (a weighted
        mean of ``e^L`` over the cell) is about ``(k + theta) dx`` and rounds down to ``k dx``, losing
        ``theta dx`` plus the cell's second-order spread.  The two unbounded end cells are cells too.
        """
        x, lw, loss = self.table(s)
        xa, xb, la, lb = x[0], x[-1], loss[0], loss[-1]
        w = np.exp(lw - lw.max())
        cw = np.cumsum(w) / w.sum()
        la_f = loss[min(np.searchsorted(cw, q_tail), len(x) - 1)]
        lb_f = loss[min(np.searchsorted(cw, 1 - q_tail), len(x) - 1)]
        if (lb_f - la_f) / dx > max_cells:
            raise ValueError(f"{(lb_f - la_f) / dx:.3g} cells of width {dx:.3g}: too many")
        big = dx * max(1, math.ceil((lb - la) / (n_coarse * dx)))
        coarse = (np.arange(math.floor(la / big), math.ceil(lb / big) + 2) - 0.5 + theta) * big
        coarse = coarse[(coarse < la_f) | (coarse > lb_f)]
        fine = (np.arange(math.floor(la_f / dx), math.ceil(lb_f / dx) + 2) - 0.5 + theta) * dx
        targets = np.concatenate([coarse, fine])
        targets = np.sort(targets[(targets > la) & (targets < lb)])
        edges = np.unique(self._invert(targets, xa, xb))
        if len(edges) < 2:
            raise ValueError("the loss is constant on the tilted law's bulk")
        log_p = self._log_mass_bounds(edges, self.p_mix, upper=False)
        log_q = self._log_mass_bounds(edges, self.q_mix, upper=True)
        ok = np.isfinite(log_p) & np.isfinite(log_q)
        log_p, log_q = log_p[ok], log_q[ok]
        cell_loss = log_p - log_q
        cell_loss = cell_loss - 16 * _U * (4 + np.abs(log_p) + np.abs(log_q))
        offset = self._grid_offset(cell_loss, log_p + s * cell_loss, dx)
        idx = np.floor((cell_loss - offset) / dx).astype(np.int64)
        lt = log_p + s * (offset + idx * dx)
        top = lt.max()
        w = np.exp(lt - top)
        tot = w.sum()
        # exp, the sum and the division: relative errors of a few ulps of |lt - top|, charged to the weights
        w = w / tot * (1 - 16 * _U * (8 + np.abs(lt) + abs(top)) - len(w) * _U)
        order = np.argsort(idx, kind="stable")
        return idx[order], np.maximum(w[order], 0.0), top + math.log(tot), offset

    @staticmethod
    def _grid_offset(cell_loss, log_weight, dx, candidates=8):
        """The grid's origin in ``[0, dx)``: the one (among the heaviest cells' losses, less a hair) that
        minimises the tilted mean of what rounding down loses.  Where the law sits inside one cell (a step's
        bulk much narrower than ``dx``), this puts a grid point just below it instead of up to ``dx`` below."""
        w = np.exp(log_weight - log_weight.max())
        keep = w > 1e-12
        w, cell_loss = w[keep], cell_loss[keep]
        heavy = np.argsort(w)[-candidates:]
        hair = 1e-9 * dx + 64 * _U * float(np.max(np.abs(cell_loss[heavy])))
        cands = np.concatenate([[0.0], np.mod(cell_loss[heavy] - hair, dx)])
        lost = [float(np.dot(np.mod(cell_loss - c, dx), w)) for c in cands]
        return float(cands[int(np.argmin(lost))])


def _log_mgf(idx, w, dx, rs):
    """``log sum_j w_j e^{r idx_j dx}`` for each ``r`` in ``rs`` (either sign), rounded up."""
    out = np.empty(len(rs))
    lw = np.log(np.maximum(w, 1e-320))
    v = idx * dx
    chunk = max(1, 2_000_000 // max(len(w), 1))
    for i in range(0, len(rs), chunk):
        r = rs[i : i + chunk]
        out[i : i + chunk] = special.logsumexp(lw[None, :] + r[:, None] * v[None, :], axis=1)
    return out + 1e-12 + 8 * _U * np.abs(out) + 4 * _U * np.abs(rs) * float(np.max(np.abs(v)))


class TiltedLowerBound:
    """A proven lower bound on ``delta(eps)`` of a composition of Gaussian-mixture steps with sensitivities >= 0
    (the Poisson-subsampled Gaussian, its schedules, mixtures), one adjacency direction, by the FFT of the composed
    privacy loss of a post-processing of the mechanism (numpy/scipy only, none of jaxdp's code).

    Why it is a lower bound.  (1) Each step's output is post-processed to the index of the cell of a partition
    that holds it (``_Step.cells``): the composition of the post-processed steps is a post-processing of the
    composition, so its hockey-stick divergence ``delta'(eps) = E_{P'}[(1 - e^{eps - L'})_+]`` is at most the
    mechanism's (the data-processing inequality); its loss ``L'`` is the sum of the steps' cell losses
    ``log(P(cell) / Q(cell))``.  This is the optimistic discretisation (a cell's loss is a mean of the loss over the
    cell, not its smallest value, so it loses second-order terms only).  (2) Each cell's loss is replaced by a grid
    value ``k dx`` below it (from a lower bound on ``P(cell)`` and an upper bound on ``Q(cell)``): ``L'`` becomes
    pointwise smaller and the integrand is nondecreasing in it.  (3) Each cell's ``P``-mass is replaced by a lower
    bound: a smaller measure with the same losses gives a smaller expectation.  (4) The composed law is the FFT of
    the tilted step laws; the sum ``sum_{b > eps} g(b) nu(b)``, ``g(b) = e^{-s (b - eps)} (1 - e^{eps - b})``, is
    lowered by ``||g||_2`` times a bound on the 2-norm of the FFT's error (Higham's bound through the powers, see
    :func:`_fft_compose`) and by ``max g`` times Chernoff bounds on the composed mass that the circular convolution
    wraps into the summed slots (``P(S > eps + N dx)`` from the right, ``P(S < base)`` from the left); mass outside
    the summed slots is dropped.  The rest is the blanket ``1e-9 + 1e-12 * steps`` in ``log delta`` for
    elementwise roundings (each a few ulps).

    The law is tilted by ``e^{sL}`` (``s``: the saddle point at the anchor ``eps``, lowered where it would lift a
    far, rare jump to rival the bulk) so that delta's region lies in the bulk of what the FFT resolves; the tilt is
    undone exactly: ``delta' = M^T e^{-s eps} sum_{b > eps} nu(b) g(b)``.  A step loses about ``theta dx`` to the
    rounding of (2), so the bound sits about ``T theta dx`` below the truth in ``eps`` (0.09 % at ``mnist_1.1`` with
    ``n_fft = 2**19``, 0.05 % with ``2**20``).  Only the tilt and the window use unproven approximations
    (:meth:`_Step.table`), and those make the bound tighter or looser, never wrong.

    Assumptions: numpy's FFT obeys Higham's error bound taken 4x, scipy's ``log_ndtr`` is accurate to ``1e-14 (1 +
    |value|)``, ``exp``/``log``/complex powers to a few ulps.
    """

    def __init__(self, parts, direction, eps, *, n_fft=2**20, theta=0.01):
        self.direction = direction
        self.steps = [(_Step(sigma, c, p, direction), int(n)) for sigma, c, p, n in parts if int(n) > 0]
        self.anchor = eps = float(eps)
        self.tilt = s = self._saddle(eps)
        if not 1e-5 < s < 1e5:  # delta ~ 1 or eps at the edge of the loss's support: nothing for a tilted FFT
            raise ValueError(f"the saddle point {s:.3g} is out of range")
        for _ in range(12):
            _, mu, var = self._moments(s)
            sd = math.sqrt(max(var, 1e-300))
            # the windows hold all but a few parts in 1e7 of delta: mass outside is charged at g's largest value
            # (~1 / (e (s + 1))), against delta's sum ~1 / (s (s + 1) sqrt(2 pi var)) e^{-(eps - mu)^2 / 2 var}
            log_rel = min(0.0, 1.0 - math.log(s * math.sqrt(2 * math.pi * max(var, 1e-300))))
            log_rel -= max(eps - mu, 0.0) ** 2 / (2 * max(var, 1e-300))
            a_lo, a_hi = self._chernoff_distances(s, max(_LOG_TAIL + log_rel, -200.0))
            if a_lo + a_hi <= 100 * sd:
                break
            # a far, rare jump (a sampled step with a large output) that the tilt lifts to rival the bulk: the
            # window would span it with coarse cells; a smaller tilt keeps it negligible (delta from the bulk)
            s *= 0.8
        self.tilt = s
        base_x = mu - a_lo
        top_needed = min(mu + a_hi, max(eps + 45.0 / s, mu + 6 * sd))
        top_needed = max(top_needed, eps + 8 * sd)  # eps in the tilted law's tail (a reduced tilt)
        width = max(top_needed - base_x, mu + a_hi - eps, 8 * sd) * 1.02
        self.n_fft, self.dx = n_fft, width / n_fft
        laws, self.log_z, shift = [], 0.0, 0.0
        for st, n in self.steps:
            idx, w, log_m, offset = st.cells(s, self.dx, theta=theta)
            laws.append((idx, w, n))
            self.log_z += n * log_m
            shift += n * offset
        # a composed grid value is shift + k dx (each step's grid has its own origin)
        self.base = math.floor((base_x - shift) / self.dx) - 1
        self.fl, self.err2 = _fft_compose(laws, n_fft)
        self.fl = self.fl[(self.base + np.arange(n_fft)) % n_fft]
        self.b = shift + (self.base + np.arange(n_fft)) * self.dx
        self.shift = shift
        # Chernoff bounds on the composed law (in grid units, the origin shifted out)
        rs = np.concatenate([np.geomspace(0.5, 200, 16) / sd, np.geomspace(0.01, 100.0, 12)])  # bulk; far jumps
        self._rs = np.concatenate([-rs, rs])
        self._mgf = sum(n * _log_mgf(idx, w, self.dx, self._rs) for idx, w, n in laws)
        self.log_left_tail = self._log_tail_below((self.base - 1) * self.dx)
        self.safety = 1e-9 + 1e-12 * sum(n for _, n in self.steps)
        self._v = var
        for st, _ in self.steps:
            st._tables.clear()  # (memory: a cached bound keeps its steps)

    def _log_tail_below(self, t):
        """Chernoff: ``log`` of a bound on the composed (unshifted) mass at grid values ``<= t``."""
        neg = self._rs < 0
        return float(np.min(self._mgf[neg] - self._rs[neg] * t))

    def _log_tail_above(self, t):
        """Chernoff: ``log`` of a bound on the composed (unshifted) mass at grid values ``>= t``."""
        pos = self._rs > 0
        return float(np.min(self._mgf[pos] - self._rs[pos] * t))

    def _moments(self, t):
        k = m = v = 0.0
        for st, n in self.steps:
            kk, mm, vv = st.moments(t)
            k, m, v = k + n * kk, m + n * mm, v + n * vv
        return k, m, v

    def _saddle(self, eps):
        """The tilt whose tilted mean of the composed loss is ``eps + 1/s`` (bisection in ``log s`` to 1e-2)."""
        lo, hi = math.log(1e-6), math.log(1e6)
        while hi - lo > 1e-2:
            mid = 0.5 * (lo + hi)
            s = math.exp(mid)
            lo, hi = (mid, hi) if self._moments(s)[1] < eps + 1.0 / s else (lo, mid)
        return math.exp(0.5 * (lo + hi))

    def _chernoff_distances(self, s, log_tail):
        """Distances below and above the tilted mean beyond which the tilted composed law has ``e^log_tail``
        (Chernoff on the tilted step laws of :meth:`_Step.table`; sizing only)."""
        laws, var = [], 0.0
        for st, n in self.steps:
            _, lw, loss = st.table(s)
            w = np.exp(lw - lw.max())
            w /= w.sum()
            m = float(np.sum(w * loss))
            laws.append((np.log(np.maximum(w, 1e-300)), loss - m, n))
            var += n * float(np.sum(w * (loss - m) ** 2))
        sd = math.sqrt(max(var, 1e-300))
        rs = np.concatenate([np.geomspace(0.05, 500.0, 48) / sd, np.geomspace(0.01, 100.0, 24)])  # bulk; far jumps
        k_up = sum(n * special.logsumexp(lw[None, :] + rs[:, None] * d[None, :], axis=1) for lw, d, n in laws)
        k_dn = sum(n * special.logsumexp(lw[None, :] - rs[:, None] * d[None, :], axis=1) for lw, d, n in laws)
        a_hi = float(np.min((k_up - log_tail) / rs))
        a_lo = float(np.min((k_dn - log_tail) / rs))
        return max(a_lo, 4 * sd), max(a_hi, 4 * sd)

    def log_delta(self, eps):
        """The proven lower bound on ``log delta(eps)`` (``-inf`` where it is 0); any ``eps``, best near the
        anchor."""
        s = self.tilt
        start = max(0, math.floor((eps - self.b[0]) / self.dx))
        stop = min(self.n_fft, start + 2 + math.ceil(40.0 / s / self.dx))  # g < e^-40 beyond: dropped
        b, fl = self.b[start:stop], self.fl[start:stop]
        pos = b > eps
        b, fl = b[pos], fl[pos]
        if len(b) == 0:
            return -math.inf
        u = b - eps
        g = np.exp(-s * u) * -np.expm1(-u)
        terms = g * fl
        # the sum's own rounding, and that of g (an exp of s (b - eps), b a few ulps off)
        total = float(np.sum(terms)) - 1e-12 * (1 + s * float(np.max(np.abs(b)))) * float(np.sum(np.abs(terms)))
        g_max = float(g.max())
        log_right = self._log_tail_above(eps - self.shift + self.n_fft * self.dx)
        alias = g_max * (math.exp(min(log_right, 700)) + math.exp(min(self.log_left_tail, 700)))
        total -= float(np.linalg.norm(g)) * self.err2 + alias
        if not total > 0:
            return -math.inf
        out = float(self.log_z - s * eps + math.log(total) - self.safety)
        return out if math.isfinite(out) else -math.inf

    def _var(self):
        if not hasattr(self, "_v"):
            self._v = self._moments(self.tilt)[2]
        return self._v

    def epsilon(self, log_delta, tol=1e-9):
        """The epsilon where :meth:`log_delta` meets ``log_delta``: the bound rejects every smaller epsilon
        (``-inf`` if it rejects none).  Regula falsi (Illinois) in a bracket grown from the anchor."""

        def f(e):
            return self.log_delta(e) - log_delta

        step = max(math.sqrt(self._var()), 1e-6)
        lo = max(self.anchor - step, 0.0)
        f_lo = f(lo)
        for _ in range(64):
            if f_lo > 0 or lo == 0:
                break
            step *= 2
            lo = max(lo - step, 0.0)
            f_lo = f(lo)
        if f_lo <= 0:
            return -math.inf
        hi = lo + step
        f_hi = f(hi)
        for _ in range(64):
            if f_hi <= 0:
                break
            step *= 2
            lo, f_lo, hi = hi, f_hi, hi + step
            f_hi = f(hi)
        if f_hi > 0:
            return lo
        side = 0
        for _ in range(100):
            if hi - lo <= tol * max(1.0, hi):
                break
            if math.isfinite(f_hi):
                mid = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
                mid = min(max(mid, lo + 0.01 * (hi - lo)), hi - 0.01 * (hi - lo))
            else:
                mid = 0.5 * (lo + hi)
            f_mid = f(mid)
            if f_mid > 0:
                lo, f_lo = mid, f_mid
                if side == 1:
                    f_hi *= 0.5
                side = 1
            else:
                hi, f_hi = mid, f_mid
                if side == -1:
                    f_lo *= 0.5
                side = -1
        return lo

    def approx_epsilon(self, log_delta):
        """A saddle-point approximation of the epsilon at ``log_delta`` (an anchor; nothing proven)."""
        lo, hi = math.log(1e-6), math.log(1e6)
        while hi - lo > 1e-2:
            mid = 0.5 * (lo + hi)
            s = math.exp(mid)
            k, m, v = self._moments(s)
            eps = m - 1.0 / s
            est = k - s * eps - math.log(s * (s + 1)) - 0.5 * math.log(2 * math.pi * max(v, 1e-300))
            lo, hi = (mid, hi) if est > log_delta else (lo, mid)
        s = math.exp(0.5 * (lo + hi))
        return self._moments(s)[1] - 1.0 / s


def _fft_compose(laws, n_fft):
    """The circular convolution of ``laws = [(indices, weights, count), ...]`` by the FFT, and a bound on the
    2-norm of its rounding error.

    With ``u_k`` the placed vectors (``|hat u_k| <= ||u_k||_1 <= 1``) and ``rho`` Higham's constant, the computed
    spectra are within ``E_k = rho sqrt(N) ||u_k||_2`` in 2-norm, so ``prod hat u_k^{n_k}`` within
    ``e^{sum n E} sum n_k E_k``; the powers and products are charged ``4u (2 + n (pi + |log|z||))`` relative per
    entry (the error of ``exp(n log z)``); the inverse transform divides 2-norms by ``sqrt(N)`` and adds its own
    ``rho``.
    """
    rho = _fft_rho(n_fft)
    y, spec_err, e_sum, coef = None, 0.0, 0.0, np.zeros(n_fft // 2 + 1)
    for idx, w, count in laws:
        u = np.bincount(idx % n_fft, weights=w, minlength=n_fft)
        norm_u = float(np.sqrt(np.sum(u * u)))
        spec_err += count * rho * norm_u
        e_sum += count * rho * math.sqrt(n_fft) * norm_u
        z = np.fft.rfft(u)
        with np.errstate(divide="ignore"):
            la = np.log(np.abs(z))
        coef += 2 + count * (math.pi + np.where(np.isfinite(la), np.abs(la), 0.0))
        zp = z**count
        y = zp if y is None else y * zp
    comp = np.fft.irfft(y, n_fft)
    beta = 4 * _U * coef * np.abs(y)
    beta_norm = math.sqrt(beta[0] ** 2 + beta[-1] ** 2 + 2 * float(np.sum(beta[1:-1] ** 2)))
    err = math.exp(e_sum) * spec_err + beta_norm / math.sqrt(n_fft) + rho * (1 + rho) * float(np.linalg.norm(comp))
    return comp, err


def lower_bound_at_delta(parts, direction, log_delta, **kw):
    """A :class:`TiltedLowerBound` anchored where ``log delta`` is ``log_delta``: at a saddle-point approximation,
    redone at the bound's own epsilon when that is far from it, or, where it rejects nothing, once further out."""
    probe = TiltedLowerBound.__new__(TiltedLowerBound)
    probe.steps = [(_Step(sigma, c, p, direction), int(n)) for sigma, c, p, n in parts if int(n) > 0]
    eps = max(probe.approx_epsilon(log_delta), 0.0)
    bound = TiltedLowerBound(parts, direction, eps, **kw)
    got = bound.epsilon(log_delta)
    tries = 0
    while not math.isfinite(got) and tries < 1:
        tries += 1
        eps = 2.0 * eps + 1e-3 if eps > 0 else 1e-3
        bound = TiltedLowerBound(parts, direction, eps, **kw)
        got = bound.epsilon(log_delta)
    if math.isfinite(got) and abs(got - eps) > 0.3 * math.sqrt(bound._var()):
        again = TiltedLowerBound(parts, direction, got, **kw)
        if again.epsilon(log_delta) >= got:
            bound = again
    return bound
