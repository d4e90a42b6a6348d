"""Monte Carlo accounting (Wang, Mahloujifar, Wu, Jia, Mittal 2023): estimates of delta(eps) and eps(delta)
with importance sampling by exponential tilting, online curves, the Monte Carlo DP verifier and
estimate-verify-release.

Depends on :mod:`jaxdp.mechanisms` and :mod:`jaxdp.numerics`.  Its numbers are *estimates* with
standard errors (the verifier's verdict carries a stated false-positive rate), never bounds.
"""

from jaxdp.accountants.montecarlo._estimate import MonteCarloEstimate, montecarlo_delta, montecarlo_epsilon
from jaxdp.accountants.montecarlo._gradient import MonteCarloGradient, montecarlo_grad
from jaxdp.accountants.montecarlo._online import OnlineCurve, online_epsilon
from jaxdp.accountants.montecarlo._verify import (
    EvrPlan,
    EvrVerdict,
    bennett_num_samples,
    evr,
    evr_offset,
    evr_plan,
    second_moment_bound,
)

__all__ = [
    "EvrPlan",
    "EvrVerdict",
    "MonteCarloEstimate",
    "MonteCarloGradient",
    "OnlineCurve",
    "bennett_num_samples",
    "evr",
    "evr_offset",
    "evr_plan",
    "montecarlo_delta",
    "montecarlo_epsilon",
    "montecarlo_grad",
    "online_epsilon",
    "second_moment_bound",
]
