"""Independent lower bounds on delta(eps) for compositions of Gaussian-mixture mechanisms.

Nothing here calls jaxdp (numpy and scipy only).  A proven upper bound must lie at
or above every lower bound, so these check jaxdp's certified numbers from below,
outside the reference table too.

The bound: post-process the ``n`` outputs of a composition into their sum
``S = sum_i x_i``.  Under the base side ``S ~ N(0, V)`` with ``V = sum_i sigma_i^2``;
under the mixture side ``S ~ sum_m w_m N(m, V)`` with ``m`` the total sensitivity
(a sum of independent per-step sensitivities, so ``w`` is the convolution of the
per-step laws, a binomial for the Poisson-subsampled Gaussian).  Post-processing
cannot increase a hockey-stick divergence, so ``delta_S(eps) <= delta(eps)``; the
likelihood ratio of the pair for ``S`` is monotone in ``s``, so ``delta_S`` is
``P(A) - e^eps Q(A)`` on a half-line ``A``, any half-line giving a lower bound.
For one step (and for compositions of Gaussians with equal noise) it is exact.

The soundness checks use :func:`lower_log_delta`: the larger of this bound and, where it applies (the
DP-SGD range: Poisson-subsampled Gaussians, their schedules and mixtures, moderate noise and steps), the proven
FFT lower bound of ``_fft_reference.TiltedLowerBound``, which is 0.001-0.1 % below the truth in epsilon on the
reference rows where this one is 7-97 % below.

Floating point: the masses are computed in log space with ``log_ndtr``; the
mixture-side weights are truncated where they are below ``1e-300`` relative,
and the dropped mass is charged against the bound where it could raise it (a
truncated ``Q``); ``P(A)`` is lowered and ``Q(A)`` raised by ``1e-12``
relative, far above the rounding of these few operations.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special, stats

_SAFETY = 1e-12


def _log_sum(x):
    return float(special.logsumexp(x)) if len(x) else -math.inf


def _binomial_weights(n: int, q: float):
    """(values, log weights, log of an upper bound on the dropped mass) of Binomial(n, q), truncated to its bulk."""
    if q >= 1.0:
        return np.array([float(n)]), np.zeros(1), -math.inf
    mean, sd = n * q, math.sqrt(n * q * (1 - q))
    lo = max(0, math.floor(mean - 40 * sd - 60))
    hi = min(n, math.ceil(mean + 40 * sd + 60))
    k = np.arange(lo, hi + 1, dtype=np.float64)
    logw = stats.binom.logpmf(k, n, q)
    # scipy's logpmf is off by ~1e-8 (relative) for n ~ 1e7, and may sum above one: scaled back to one at most
    logw = logw - max(float(special.logsumexp(logw)), 0.0)
    keep = logw > logw.max() - 700
    tails = [_log_sum(logw[~keep])]
    if lo > 0:
        tails.append(float(stats.binom.logcdf(lo - 1, n, q)))
    if hi < n:
        tails.append(float(stats.binom.logsf(hi, n, q)))
    return k[keep], logw[keep], _log_sum(np.array(tails))


def _categorical_power(c, p, n: int):
    """(values, log weights, log dropped) of the sum of ``n`` i.i.d. draws of ``c`` (integers) with probs ``p``.

    Direct convolution of nonnegative terms (no cancellation); what underflows is below 1e-300 per entry.
    """
    c = np.asarray(c, dtype=np.int64)
    p = np.asarray(p, dtype=np.float64)
    if n > 4000:
        raise ValueError("categorical sums are computed for n <= 4000 only")
    base = np.zeros(c.max() + 1)
    np.add.at(base, c, p)
    out = np.ones(1)
    power = base
    m = n
    while m:
        if m & 1:
            out = np.convolve(out, power)
        m >>= 1
        if m:
            power = np.convolve(power, power)
    vals = np.nonzero(out > 0)[0]
    return vals.astype(np.float64), np.log(out[vals]), math.log(len(out) * 1e-300)


def _poisson_binomial(parts):
    """(values, log weights, log dropped) of the total sensitivity of a composition of parts."""
    vals, logw, log_drop = np.zeros(1), np.zeros(1), -math.inf
    for _, c, p, n in parts:
        c = np.asarray(c, dtype=np.float64)
        if len(c) == 2 and c[0] == 0 and c[1] == 1:
            v, lw, ld = _binomial_weights(int(n), float(p[1]))
        elif len(c) == 1:
            v, lw, ld = np.array([c[0] * n]), np.zeros(1), -math.inf
        else:
            v, lw, ld = _categorical_power(c, p, int(n))
        grid_v = (vals[:, None] + v[None, :]).ravel()
        grid_w = (logw[:, None] + lw[None, :]).ravel()
        uniq, inv = np.unique(grid_v, return_inverse=True)
        acc = np.full(uniq.shape, -np.inf)
        np.logaddexp.at(acc, inv, grid_w)
        keep = acc > acc.max() - 700
        # mass dropped so far: carried through the convolution (weights sum to at most one) plus this part's
        log_drop = _log_sum(np.array([log_drop, ld, _log_sum(acc[~keep])]))
        vals, logw = uniq[keep], acc[keep]
    return vals, logw, log_drop


def sum_statistic_log_delta(parts, direction: str, eps: float) -> float:
    """Lower bound on ``log delta(eps)`` (``-inf`` when it is 0).

    Args:
      parts: ``[(sigma, sensitivities, probs, count), ...]`` (a Gaussian is ``([1.0], [1.0])``).
      direction: ``"remove"`` (mixture side is P) or ``"add"`` (mixture side is Q).
      eps: epsilon >= 0.
    """
    var = sum(n * s * s for s, _, _, n in parts)
    sd = math.sqrt(var)
    m, logw, log_drop = _poisson_binomial(parts)

    def log_ratio(s):  # log d(mixture side)/d(base side) at s, increasing in s
        return special.logsumexp(logw + (m * s - 0.5 * m * m) / var)

    sign = 1.0 if direction == "remove" else -1.0

    def loss(s):
        return sign * log_ratio(s)

    # the set A = {loss > eps}: s > s* (remove) or s < s* (add)
    lo, hi = -60 * sd + m.min(), m.max() + 60 * sd
    f_lo, f_hi = loss(lo) - eps, loss(hi) - eps
    if direction == "remove":
        if f_hi <= 0:
            return -math.inf
        s_star = lo if f_lo > 0 else optimize.brentq(lambda s: loss(s) - eps, lo, hi, xtol=1e-14 * (1 + abs(hi)))
        z_mix = (s_star - m) / sd
        log_pa = special.logsumexp(logw + special.log_ndtr(-z_mix))  # mixture side = P
        log_qa = special.log_ndtr(-s_star / sd)  # base side = Q
    else:
        if f_lo <= 0:
            return -math.inf
        s_star = hi if f_hi > 0 else optimize.brentq(lambda s: loss(s) - eps, lo, hi, xtol=1e-14 * (1 + abs(hi)))
        log_pa = special.log_ndtr(s_star / sd)  # base side = P
        z_mix = (s_star - m) / sd
        log_qa = np.logaddexp(special.logsumexp(logw + special.log_ndtr(z_mix)), log_drop)  # Q, dropped mass added
    log_pa += math.log1p(-_SAFETY)
    log_qa += math.log1p(_SAFETY)
    gap = eps + log_qa - log_pa
    if gap >= 0:
        return -math.inf
    return float(log_pa + math.log(-math.expm1(gap)))


def psg(sigma, q, n=1):
    """A part for :func:`sum_statistic_log_delta`: ``n`` steps of the Poisson-subsampled Gaussian."""
    if q >= 1.0:
        return (sigma, [1.0], [1.0], n)
    return (sigma, [0.0, 1.0], [1.0 - q, q], n)


def exact_one_step_log_delta(sigma, c, p, direction, eps):
    """Exact ``log delta(eps)`` of one step of a mixture pair (the sum statistic of one output is the output)."""
    return sum_statistic_log_delta([(sigma, c, p, 1)], direction, eps)


# -- the dispatcher: the rounded-down FFT where it applies, the sum statistic everywhere ---------------------------

#: where the FFT lower bound (``_fft_reference.TiltedLowerBound``) is used: compositions of Gaussian-mixture steps
#: with sensitivities >= 0 (the Poisson-subsampled Gaussian, schedules of it, mixtures), not all plain Gaussians
#: (there the sum statistic is exact), noise and step counts of the DP-SGD range.  Outside it, and where it
#: fails, only the sum statistic checks.
FFT_SIGMA_RANGE = (0.2, 1e3)
FFT_MAX_STEPS = 1_000_000
FFT_N = 2**19  # slots of the default FFT: ~0.5-1.5 s a bound, ~0.1 % below the truth in epsilon at mnist_1.1

_FFT_CACHE: dict = {}


def fft_applies(parts) -> bool:
    """Whether :func:`lower_log_delta` uses the FFT bound for ``parts``."""
    if not 1 < sum(int(n) for *_, n in parts) <= FFT_MAX_STEPS:  # one step: the sum statistic is exact
        return False
    plain = True
    for sigma, c, p, _ in parts:
        c, p = np.asarray(c, dtype=np.float64), np.asarray(p, dtype=np.float64)
        live = c[p > 0]
        if np.any(live < 0) or not np.any(live > 0) or not FFT_SIGMA_RANGE[0] <= sigma <= FFT_SIGMA_RANGE[1]:
            return False
        plain = plain and len(live) == 1
    return not plain


def _key(parts):
    return tuple((float(s), tuple(map(float, c)), tuple(map(float, p)), int(n)) for s, c, p, n in parts)


def fft_bound(parts, direction, *, eps=None, log_delta=None, n_fft=None):
    """The FFT lower bound's curve for one direction, anchored at ``eps`` (a delta query) or where ``log delta``
    is ``log_delta`` (an epsilon query); ``None`` where it does not apply or fails (cached)."""
    from _fft_reference import TiltedLowerBound, lower_bound_at_delta

    n_fft = n_fft or FFT_N
    key = (_key(parts), direction, eps, log_delta, n_fft)
    if key not in _FFT_CACHE:
        if len(_FFT_CACHE) > 16:
            _FFT_CACHE.clear()
        bound = None
        if fft_applies(parts):
            try:
                if log_delta is not None:
                    bound = lower_bound_at_delta(parts, direction, log_delta, n_fft=n_fft)
                else:
                    bound = TiltedLowerBound(parts, direction, eps, n_fft=n_fft)
            except (ValueError, ArithmeticError, IndexError, MemoryError):  # outside its working range: unused
                bound = None
        _FFT_CACHE[key] = bound
    return _FFT_CACHE[key]


def lower_log_delta(parts, directions, eps, *, log_delta=None, n_fft=None, which=None) -> float:
    """The best independent lower bound on ``log delta(eps)`` (``<= 0``; ``-inf`` where it is 0) for adjacency
    ``directions`` (several: the larger of them, as add-or-remove): the FFT bound where :func:`fft_applies`, and
    the sum statistic, the larger of the two.  ``log_delta``: the target of an epsilon query (the FFT bound is then
    anchored at the epsilon of that delta, so that one transform checks every method's answer).  ``which``: a list
    that gets ``"fft"`` or ``"sum"``, whichever gave the value."""
    best, src = -math.inf, "sum"
    for d in directions:
        best = max(best, sum_statistic_log_delta(parts, d, eps))
        bound = fft_bound(parts, d, eps=None if log_delta is not None else float(eps), log_delta=log_delta, n_fft=n_fft)
        if bound is not None:
            got = bound.log_delta(eps)
            if got > best:
                best, src = got, "fft"
    if which is not None:
        which.append(src)
    return min(best, 0.0)
