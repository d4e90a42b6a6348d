"""Privacy spent by a training run, step by step, with a certified budget stop."""

from __future__ import annotations

import functools
import math

import numpy as np

from jaxdp.accountants import epsilon_for_delta, method_info
from jaxdp.mechanisms import Composition, MixtureOfGaussians, PoissonSubsampledGaussian
from jaxdp.numerics import host_largest_satisfying
from jaxdp.numerics import validate as _validate

#: The largest number of further steps :meth:`PrivacyTracker.steps_left` searches.
MAX_STEPS = 10**7
# The budget search runs to twice the reported cap, so that a horizon found beyond ``MAX_STEPS`` still answers
# ``steps_left`` exactly (capped at ``MAX_STEPS``) for the next ``MAX_STEPS`` steps recorded at its hyperparameters.
_SEARCH_LIMIT = 2 * MAX_STEPS


@functools.lru_cache(maxsize=256)
def _fixed_batch_prob(dataset_size: int, batch_size: int, adjacency) -> float:
    """The weight ``p`` of sensitivity 2 in ``MixtureOfGaussians.fixed_batch_group`` (a group of one): the
    probability that the differing record is in the batch, rounded up to dominate.  Cached: ``record`` asks for it
    every step."""
    probs = MixtureOfGaussians.fixed_batch_group(
        1.0, dataset_size=dataset_size, batch_size=batch_size, adjacency=adjacency
    ).probs
    return float(probs[1])


class PrivacyTracker:
    """The privacy a DP-SGD run has spent, recorded step by step as it trains.

    Each :meth:`record` is O(1) (runs of equal ``(noise_multiplier, sampling_prob)`` are one segment).  The
    history is accounted as a stacked :class:`~jaxdp.Composition` (one compiled program for every schedule
    of up to 128 segments, so new steps never recompile): :meth:`epsilon` is the certified bound,
    :meth:`epsilon_estimate` the millisecond saddle-point estimate for progress bars.  With a
    ``target_epsilon``, :meth:`steps_left` / :meth:`can_step` give the budget stop: it is computed with the
    certified method once per change of hyperparameters, then checked in O(1) per step.

    Args:
      delta: the delta of the guarantee, in ``(0, 1)``.
      target_epsilon: optional budget ``> 0`` for :meth:`steps_left` and :meth:`can_step`.
      method: the certified accountant (default: the library default, ``"certified"``).
      estimate_method: the accountant of :meth:`epsilon_estimate` (default ``"saddlepoint"``).
      adjacency: ``"add_or_remove"`` (default), ``"remove"`` or ``"add"``.

    Example:
      >>> from jaxdp.training import PrivacyTracker
      >>> tracker = PrivacyTracker(delta=1e-5, target_epsilon=2.0, method="rdp", estimate_method="rdp")
      >>> for step in range(100):
      ...     tracker.record(noise_multiplier=1.0, sampling_prob=0.01)
      >>> tracker.num_steps, round(tracker.epsilon(), 3)
      (100, 1.214)
    """

    def __init__(
        self, *, delta, target_epsilon=None, method=None, estimate_method="saddlepoint", adjacency="add_or_remove"
    ):
        _validate.open_unit("delta", delta)
        if target_epsilon is not None:
            _validate.positive("target_epsilon", target_epsilon)
        if method is not None and not method_info(method).certified:
            raise ValueError(f"method must be a certified accountant (a proven bound), got {method!r}.")
        method_info(estimate_method)  # unknown names raise here, not at the first query
        self.delta = float(delta)
        self.target_epsilon = None if target_epsilon is None else float(target_epsilon)
        self.method = method
        self.estimate_method = estimate_method
        self.adjacency = adjacency
        self._segments: list[list] = []  # [sigma, q, count]
        self._total = 0
        # The budget horizon of the last steps_left / can_step query, (sigma, q, H, exact): (sigma, q) are the
        # query's step parameters (those ``_step_params`` maps Poisson and fixed-batch steps to: they fix the step's
        # privacy loss, and are what the history records), H the largest *total* number of steps (history + n
        # steps at (sigma, q)) within budget, computed against the history of that moment.  Recording k more steps
        # at exactly (sigma, q) turns that history into history + k such steps (runs merge into one segment, so
        # the accounted composition is the same) and leaves H valid: steps_left = H - num_steps.  Any other record
        # changes the history otherwise, and ``record`` drops the horizon.  ``exact`` is False when the search hit
        # its limit: H is then a lower bound, good while it is at least MAX_STEPS ahead of the history.
        self._horizon: tuple | None = None

    # -- recording -----------------------------------------------------------------------------------------

    def record(
        self,
        *,
        noise_multiplier,
        sampling_prob=None,
        num_steps=1,
        sampling="poisson",
        dataset_size=None,
        batch_size=None,
    ):
        """Records ``num_steps`` steps of DP-SGD with this noise multiplier.

        ``sampling="poisson"`` (default): each example joins the batch with probability ``sampling_prob``
        (``PoissonSubsampledGaussian(noise_multiplier, sampling_prob)``).  ``sampling="fixed"``: a batch of
        exactly ``batch_size`` out of ``dataset_size`` examples, drawn without replacement
        (:meth:`~jaxdp.MixtureOfGaussians.fixed_batch_group`, Ganesh 2024, Thm 3.3); no ``sampling_prob``.
        ``dataset_size`` is ``N``, the training set the batches are drawn from.  Its dominating pair,
        ``N(0, s^2)`` against ``(1 - p) N(0, s^2) + p N(2, s^2)`` with ``p`` the weight of
        ``fixed_batch_group(s, dataset_size=N, batch_size=B, adjacency=adjacency)`` (``B / N`` under
        ``"add_or_remove"`` and ``"remove"``, ``B / (N + 1)`` under ``"add"``, rounded up to dominate), is that of
        the Poisson-subsampled Gaussian at ``(s / 2, p)`` scaled by 2, so it is recorded as such: the same privacy
        loss, and the same compiled program as Poisson steps.
        """
        sigma, q = self._step_params(noise_multiplier, sampling_prob, sampling, dataset_size, batch_size)
        horizon = self._horizon
        if horizon is not None and (horizon[0] != sigma or horizon[1] != q):
            self._horizon = None  # computed for steps at other parameters: this history is not its history + k
        last = self._segments[-1] if self._segments else None
        if num_steps == 1 and type(num_steps) is int and last is not None and last[0] == sigma and last[1] == q:
            last[2] += 1  # the per-step fast path: these values were checked when the segment began
            self._total += 1
            return
        _validate.positive("noise_multiplier", sigma)
        _validate.probability("sampling_prob", q)
        _validate.num_steps("num_steps", num_steps)
        n = int(num_steps)
        if last is not None and last[0] == sigma and last[1] == q:
            last[2] += n
        else:
            self._segments.append([sigma, q, n])
        self._total += n

    def _step_params(self, noise_multiplier, sampling_prob, sampling, dataset_size, batch_size):
        """``(sigma, q)`` of the Poisson-subsampled Gaussian recording a step (see :meth:`record`)."""
        if sampling == "poisson":
            if dataset_size is not None or batch_size is not None:
                raise ValueError("dataset_size and batch_size describe sampling='fixed'; Poisson takes sampling_prob.")
            if sampling_prob is None:
                raise ValueError("sampling='poisson' needs sampling_prob.")
            return float(noise_multiplier), float(sampling_prob)
        if sampling != "fixed":
            raise ValueError(f"sampling must be 'poisson' or 'fixed', got {sampling!r}.")
        if sampling_prob is not None:
            raise ValueError("sampling='fixed' takes dataset_size and batch_size, not sampling_prob.")
        n = _validate.integer("dataset_size", dataset_size)
        b = _validate.integer("batch_size", batch_size)
        if b > n:
            raise ValueError(f"batch_size must be at most dataset_size ({n}), got {b}.")
        _validate.positive("noise_multiplier", noise_multiplier)
        return 0.5 * float(noise_multiplier), _fixed_batch_prob(n, b, self.adjacency)

    @property
    def num_steps(self) -> int:
        """Steps recorded so far."""
        return self._total

    @property
    def num_segments(self) -> int:
        """Runs of equal hyperparameters recorded so far."""
        return len(self._segments)

    def composition(self, extra=None) -> Composition:
        """The recorded steps (and ``extra = (sigma, q, count)`` more) as a stacked :class:`~jaxdp.Composition`."""
        segs = [*self._segments, *([] if extra is None else [list(extra)])]
        if not segs:
            raise ValueError("no steps recorded yet.")
        arr = np.asarray(segs, dtype=np.float64)
        return Composition.from_schedule(
            noise_multipliers=arr[:, 0], sampling_probs=arr[:, 1], counts=arr[:, 2], adjacency=self.adjacency
        )

    # -- queries -------------------------------------------------------------------------------------------

    def _epsilon(self, method, extra=None) -> float:
        segs = [*self._segments, *([] if extra is None else [list(extra)])]
        if len(segs) == 1 or (len(segs) == 2 and segs[0][:2] == segs[1][:2]):
            # one run of equal steps: the mechanism itself (the same value as a one-segment stack, a smaller
            # program and a cheaper query)
            sigma, q = segs[0][:2]
            mech = PoissonSubsampledGaussian(sigma, q, adjacency=self.adjacency)
            n = sum(sg[2] for sg in segs)
            return float(epsilon_for_delta(mech, num_steps=n, delta=self.delta, method=method))
        return float(epsilon_for_delta(self.composition(extra), delta=self.delta, method=method))

    def epsilon(self) -> float:
        """The certified epsilon (a proven upper bound) of the steps recorded so far (0 before any)."""
        if not self._segments:
            return 0.0
        return self._epsilon(self.method)

    def epsilon_estimate(self) -> float:
        """The ``estimate_method`` epsilon of the steps so far (an estimate: for progress reports)."""
        if not self._segments:
            return 0.0
        return self._epsilon(self.estimate_method)

    def steps_left(
        self, *, noise_multiplier, sampling_prob=None, sampling="poisson", dataset_size=None, batch_size=None
    ) -> int:
        """The largest ``n >= 0`` such that ``n`` more steps at these hyperparameters keep the *certified*
        epsilon within ``target_epsilon`` (at most ``MAX_STEPS``; 0 when the steps recorded already exceed it).
        The sampling arguments are those of :meth:`record`.

        The answer is that of a fresh tracker given the same history, whatever the order of calls.  It is
        computed with the certified method when the hyperparameters asked about change, or steps at other
        hyperparameters were recorded since; while the run records steps at the ones asked about, it is updated
        in O(1).
        """
        sigma, q = self._query_params(noise_multiplier, sampling_prob, sampling, dataset_size, batch_size)
        horizon, left = self._horizon, None
        if horizon is not None and horizon[0] == sigma and horizon[1] == q:  # the per-step fast path
            left = horizon[2] - self._total
            if not horizon[3] and left < MAX_STEPS:
                left = None  # a lower bound no longer MAX_STEPS ahead: search again
        if left is None:
            left = self._horizon_for(sigma, q)[2] - self._total
        return min(max(left, 0), MAX_STEPS)

    def can_step(self, *, noise_multiplier, sampling_prob=None, **sampling) -> bool:
        """Whether one more step at these hyperparameters stays within ``target_epsilon`` (certified), i.e.
        ``steps_left(...) >= 1``; the sampling arguments are those of :meth:`record`.  O(1) per step while the
        run records steps at these hyperparameters."""
        sigma, q = self._query_params(noise_multiplier, sampling_prob, **sampling)
        horizon = self._horizon
        if horizon is None or horizon[0] != sigma or horizon[1] != q or (not horizon[3] and horizon[2] <= self._total):
            horizon = self._horizon_for(sigma, q)
        return horizon[2] - self._total >= 1  # H exact, or a lower bound: H - total >= 1 proves a step fits

    def _query_params(
        self, noise_multiplier, sampling_prob=None, sampling="poisson", dataset_size=None, batch_size=None
    ):
        if self.target_epsilon is None:
            raise ValueError("steps_left needs a target_epsilon (PrivacyTracker(target_epsilon=...)).")
        return self._step_params(noise_multiplier, sampling_prob, sampling, dataset_size, batch_size)

    def _horizon_for(self, sigma, q) -> tuple:
        """Searches the budget horizon of steps at ``(sigma, q)`` after the current history, and caches it."""
        _validate.positive("noise_multiplier", sigma)
        _validate.probability("sampling_prob", q)
        n = self._largest_within_budget(sigma, q)
        self._horizon = (sigma, q, self._total + n, n < _SEARCH_LIMIT)
        return self._horizon

    def _certified_with(self, sigma, q, n) -> float:
        return self._epsilon(self.method, (sigma, q, n))

    def _largest_within_budget(self, sigma, q, limit=_SEARCH_LIMIT) -> int:
        """The largest ``n <= limit`` with certified epsilon(history + n steps) <= target (0 when there is none):
        a guess from the estimate, one secant step on the certified value, then the certified check brackets
        (usually n and n + 1) and bisects.  The result ``n`` satisfies the check and ``n + 1`` does not (or
        ``n == limit``); the certified epsilon is nondecreasing in n, so it is the largest."""
        target = self.target_epsilon
        cert = lambda n: self._certified_with(sigma, q, n)  # noqa: E731
        ok = lambda n: cert(n) <= target  # noqa: E731
        guess, slope = self._estimate_guess(sigma, q, limit)
        c = cert(guess)
        n1 = guess
        if math.isfinite(c) and slope > 0:  # the certified curve runs parallel to the estimate near the guess
            shift = (target - c) / slope
            if math.isfinite(shift):
                n1 = int(min(max(guess + math.floor(shift), 1), limit))
        return host_largest_satisfying(ok, n1, limit)

    def _estimate_guess(self, sigma, q, limit=_SEARCH_LIMIT):
        """``(n, slope)``: the largest ``n <= limit`` whose estimate is within the target (to 0.5 %; 1 when there
        is none), and the estimate's slope in n there.  Only a starting point: the certified search decides.

        epsilon(n) is close to a power of n over any stretch, so the search steps along the power law through its
        last two values rather than doubling and bisecting: fewer estimates, each a query of the estimate's
        program."""
        cache: dict = {}
        target = self.target_epsilon

        def est(n):
            if n not in cache:
                cache[n] = self._epsilon(self.estimate_method, (sigma, q, n))
            return cache[n]

        def within(n):
            return est(n) <= target  # (NaN: not within)

        def crossing(a, b):
            """Where the line through ``a`` and ``b`` in (log n, log epsilon) meets the target; NaN where that
            line says nothing (a value not positive and finite, or equal values)."""
            ea, eb = est(a), est(b)
            if not (0 < ea < math.inf and 0 < eb < math.inf and ea != eb and target > 0):
                return math.nan
            log_n = math.log(a) + math.log(target / ea) * math.log(b / a) / math.log(eb / ea)
            return math.exp(min(log_n, 60.0))  # (a near-flat line points far beyond any limit)

        # A secant in (log n, log epsilon) through the last two estimates, kept inside the bracket (lo within the
        # target, 1 by convention; hi beyond it, or the limit): log epsilon is convex in log n, so the secant
        # converges from above quickly.  Each point is placed half a tolerance on the far side of its prediction, so
        # that a converged prediction closes the bracket with one more estimate.
        lo, hi = 1, None
        a, b = 1, 2
        if not within(2):
            hi = 2
        else:
            lo = 2
        while hi is None or hi - lo > max(1, lo // 200):
            if hi is None and lo >= limit:
                hi = limit
                break
            tol = max(1, lo // 200)
            c = crossing(a, b)
            if math.isfinite(c):
                c += -0.5 * tol if est(b) > target else 0.5 * tol
            if not math.isfinite(c) or (hi is not None and not lo < c < hi):  # (the line leaves the bracket)
                c = 2.0 * lo if hi is None else math.sqrt(lo * hi)
            top = min(64 * lo, limit) if hi is None else hi - 1
            c = min(max(round(c), lo + 1), top)
            if within(c):
                lo = c
            else:
                hi = c
            a, b = b, c
        slope = (est(hi) - est(lo)) / (hi - lo) if hi > lo else math.nan
        return lo, slope if math.isfinite(slope) else math.nan

    def __repr__(self):
        return (
            f"PrivacyTracker(delta={self.delta:g}, num_steps={self.num_steps}, num_segments={self.num_segments}, "
            f"target_epsilon={self.target_epsilon})"
        )
