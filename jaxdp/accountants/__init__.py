"""Accountants: per-direction ``log delta(eps)`` / ``eps(log delta)`` of a composition, the method
registry, and the public entry points.

Depends on :mod:`jaxdp.mechanisms` and :mod:`jaxdp.numerics`.  Each method lives in its own module
and declares its :class:`MethodInfo` (see :mod:`jaxdp.accountants._api`); what the methods share
(``K, K', K''``, the saddle point, the line characteristic function) is in ``_cgf``.
"""

from jaxdp.accountants._api import (
    MethodInfo,
    available_methods,
    default_method,
    delta_for_epsilon,
    epsilon_for_delta,
    epsilon_of_composition,
    log_delta_for_epsilon,
    log_delta_of_composition,
    method_info,
    register_method,
    renyi_dp,
)
from jaxdp.accountants._exact import log_delta_gaussian
from jaxdp.accountants.montecarlo import (
    MonteCarloEstimate,
    MonteCarloGradient,
    montecarlo_delta,
    montecarlo_epsilon,
    montecarlo_grad,
)

__all__ = [
    "MethodInfo",
    "MonteCarloEstimate",
    "MonteCarloGradient",
    "available_methods",
    "default_method",
    "delta_for_epsilon",
    "epsilon_for_delta",
    "epsilon_of_composition",
    "log_delta_for_epsilon",
    "log_delta_gaussian",
    "log_delta_of_composition",
    "method_info",
    "montecarlo_delta",
    "montecarlo_epsilon",
    "montecarlo_grad",
    "register_method",
    "renyi_dp",
]
