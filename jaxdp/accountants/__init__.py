"""Accountants: per-direction ``log delta(eps)`` / ``eps(log delta)`` of a composition, the method
registry, and the public entry points.

Depends on :mod:`jaxdp.mechanisms` and :mod:`jaxdp.numerics`.  Each method lives in its own module
and declares its :class:`MethodInfo` (see :mod:`jaxdp.accountants._api`), wrapped by the combinators
:func:`screened` and :func:`with_fallback` where a policy across methods applies; what the methods share
(``K, K', K''``, the saddle point, the line characteristic function) is in ``_cgf``, the bounds they share
(``delta_2`` and its certified bound, pure DP, Rényi DP) in ``_bounds``; a method module imports those, never
another method module.
"""

from jaxdp.accountants._api import (
    CharacteristicResult,
    MethodInfo,
    SplitTerms,
    available_methods,
    characteristic_terms,
    default_method,
    delta_for_epsilon,
    epsilon_for_delta,
    log_delta_for_epsilon,
    method_info,
    register_method,
    renyi_dp,
    saddlepoint_terms,
    screened,
    with_fallback,
)
from jaxdp.accountants._group import GroupCurve, group_curve
from jaxdp.accountants._registry import Screened, WithFallback
from jaxdp.accountants._report import PrivacyReport, privacy_report
from jaxdp.accountants.montecarlo import (
    EvrPlan,
    EvrVerdict,
    MonteCarloEstimate,
    MonteCarloGradient,
    OnlineCurve,
    bennett_num_samples,
    evr,
    evr_offset,
    evr_plan,
    montecarlo_delta,
    montecarlo_epsilon,
    montecarlo_grad,
    online_epsilon,
    second_moment_bound,
)

__all__ = [
    "CharacteristicResult",
    "EvrPlan",
    "EvrVerdict",
    "GroupCurve",
    "MethodInfo",
    "MonteCarloEstimate",
    "MonteCarloGradient",
    "OnlineCurve",
    "PrivacyReport",
    "Screened",
    "SplitTerms",
    "WithFallback",
    "available_methods",
    "bennett_num_samples",
    "characteristic_terms",
    "default_method",
    "delta_for_epsilon",
    "epsilon_for_delta",
    "evr",
    "evr_offset",
    "evr_plan",
    "group_curve",
    "log_delta_for_epsilon",
    "method_info",
    "montecarlo_delta",
    "montecarlo_epsilon",
    "montecarlo_grad",
    "online_epsilon",
    "privacy_report",
    "register_method",
    "renyi_dp",
    "saddlepoint_terms",
    "screened",
    "second_moment_bound",
    "with_fallback",
]
