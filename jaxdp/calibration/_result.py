"""What a calibration returns (:class:`CalibrationResult`, its status codes and messages), the searches' tolerances,
and the small pieces both searches use."""

from __future__ import annotations

import dataclasses
import enum

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import accountants as _accountant
from jaxdp.accountants import internal as _internal
from jaxdp.mechanisms import PoissonSubsampledGaussian, as_composition
from jaxdp.numerics import (
    DOWN,
    NEAREST,
    UP,
    nan_to,
    pytree_dataclass,
    to_f64,
)

METHOD_XTOL = 3e-4  # the estimate's Newton stops once its step (in log parameter) is below this
HOST_XTOL = 1e-6  # the host search's secant stops once its step (in log parameter) is below this
#   (the step is taken: the secant's error after it is of the order of this step times the one before)
HOST_EVALUATIONS = 60  # the host search's evaluations at most (about four, usually)
#: concrete inputs with at most this many configurations are calibrated on the host, over the accountants' per-query
#: programs (no compile of the calibration's own, for a few more dispatches per configuration); larger concrete arrays
#: run the compiled search (``lax.map``, kept on disk by ``program_cache``), whose compile a sweep amortises
HOST_CONFIGURATIONS = 16
LINEAR_REACH = 1e-3  # the reported estimate is linearised from the search up to this (log) distance
CERTIFY_ROUNDS = 12  # certified evaluations at most (one, usually)
CERTIFY_XTOL = 2e-5  # the check stops within this (log-parameter) distance of the last failing point
SIGMA_MIN = 0.05  # search bracket of the noise multiplier (below: every accountant overflows)
SAMPLING_PROB_MIN = 1e-9


class Status(enum.IntEnum):
    """``CalibrationResult.status`` (an integer array, comparable with these)."""

    OK = 0
    INFEASIBLE = 1  # no value in the allowed range meets the budget
    AT_LIMIT = 2  # the budget is met at the edge of the range (q = 1, steps = max_steps, sigma = SIGMA_MIN)
    NOT_CERTIFIED = 3  # the certified accountant could not confirm the budget within CERTIFY_ROUNDS


OK, INFEASIBLE, AT_LIMIT, NOT_CERTIFIED = Status.OK, Status.INFEASIBLE, Status.AT_LIMIT, Status.NOT_CERTIFIED

_MESSAGES = {
    ("noise_multiplier", OK): "ok",
    ("noise_multiplier", INFEASIBLE): "even sigma_max does not meet the budget; raise sigma_max or relax the budget",
    ("noise_multiplier", AT_LIMIT): f"sigma = {SIGMA_MIN} (the smallest searched) already meets the budget",
    ("sampling_prob", OK): "ok",
    ("sampling_prob", INFEASIBLE): f"even q = {SAMPLING_PROB_MIN:g} exceeds the budget",
    ("sampling_prob", AT_LIMIT): "q = 1 (no subsampling) already meets the budget",
    ("num_steps", OK): "ok",
    ("num_steps", INFEASIBLE): "even one step exceeds the budget",
    ("num_steps", AT_LIMIT): "max_steps steps already meet the budget",
}


@pytree_dataclass(
    data=(
        "noise_multiplier",
        "sampling_prob",
        "num_steps",
        "epsilon_estimate",
        "epsilon_certified",
        "iterations",
        "status",
    ),
    static=("solved_for", "method", "certify"),
)
class CalibrationResult:
    """The outcome of a calibration (arrays when the inputs were arrays).

    Attributes:
      noise_multiplier, sampling_prob, num_steps: the hyperparameters, the
        solved one included (NaN where no value meets the budget).
      epsilon_estimate: epsilon of ``method`` (the estimate) at the answer.
      epsilon_certified: the certified epsilon at the answer (``<= target``
        wherever ``status`` is 0 or 2); NaN when ``certify`` is None.
      iterations: Newton iterations of the search plus certified evaluations.
      status: 0 ok; 1 infeasible (see :attr:`message`); 2 the budget is met at
        the edge of the allowed range (q = 1, ``max_steps``, the smallest
        sigma searched); 3 the certified accountant did not confirm the budget.
      solved_for: ``"noise_multiplier"``, ``"sampling_prob"`` or ``"num_steps"``.
      method: the estimate used for the search.
      certify: the certified method of the final check (or None).
    """

    noise_multiplier: jax.Array
    sampling_prob: jax.Array
    num_steps: jax.Array
    epsilon_estimate: jax.Array
    epsilon_certified: jax.Array
    iterations: jax.Array
    status: jax.Array
    solved_for: str
    method: str
    certify: str | None

    @property
    def value(self):
        """The solved-for hyperparameter."""
        return getattr(self, self.solved_for)

    @property
    def message(self):
        """A sentence per status (a list for arrays)."""
        codes = np.asarray(self.status)

        def one(code):
            if int(code) == NOT_CERTIFIED:
                return f"the certified accountant ({self.certify}) could not confirm the budget"
            return _MESSAGES[(self.solved_for, int(code))]

        return one(codes) if codes.ndim == 0 else [one(c) for c in codes.ravel()]


def _rounding(result: CalibrationResult) -> CalibrationResult:
    """Float32 rounding of a result traced with x64 off: sigma up, q and steps down, the certified epsilon up."""
    return dataclasses.replace(
        result,
        noise_multiplier=UP,
        sampling_prob=DOWN,
        num_steps=DOWN,
        epsilon_estimate=NEAREST,
        epsilon_certified=UP,
        iterations=NEAREST,
        status=NEAREST,
    )


def _epsilon(mechanism, num_steps, delta, method):
    """Epsilon of the composition (pure, traceable); NaN (overflow) is read as +inf."""
    comp = to_f64(as_composition(mechanism, num_steps))
    eps = _internal.epsilon_of_composition(comp, delta, method)
    return nan_to(eps, jnp.inf)


def _log_gap(eps, target):
    """``log eps - log target`` (``+inf`` for infinite eps, ``-inf`` for eps = 0)."""
    return jnp.log(jnp.maximum(eps, 0.0)) - jnp.log(target)


#: the calibrated parameter's first move before its certified check, relative, by certified method: about the
#: method's slack over the estimate the search solved (the coarse lattice's is about ten times the fine one's)
CALIBRATION_NUDGES = {"certified-fast": 3e-5}
DEFAULT_NUDGE = 3e-6


def _nudge(certify):
    """The certified method's first move, relative (:data:`CALIBRATION_NUDGES`)."""
    return CALIBRATION_NUDGES.get(_accountant.method_info(certify).name, DEFAULT_NUDGE)


def _status(infeasible, ok, at_limit):
    return jnp.where(infeasible, INFEASIBLE, jnp.where(~ok, NOT_CERTIFIED, jnp.where(at_limit, AT_LIMIT, OK)))


def _certified_name(certify):  # (certify="evr" is handled before, by _evr_calibration)
    info = _accountant.method_info(certify)
    if not info.certified:
        raise ValueError(f"certify must name a certified method (e.g. 'certified'), got {certify!r}.")
    return info.name


# -- noise multiplier -----------------------------------------------------------------------------


def _psg_family(sigma, sampling_prob):
    return PoissonSubsampledGaussian(sigma, sampling_prob)
