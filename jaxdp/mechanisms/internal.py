"""The mechanisms' internals that the accountants share (as ``equinox.internal``): constants and kernels of the
mixture's log ratio and quadrature, a mixture's log density, and the scans over a composition's parts.  Not part
of the public surface: they may change without notice."""

from jaxdp.mechanisms._composition import STACK_CAPACITY, is_stacked, scan_parts, scan_stack
from jaxdp.mechanisms._laws import gauss_mixture_log_density
from jaxdp.mechanisms._log_ratio import (
    LOG_ZERO,
    NEWTON_MAX_ITER,
    UNROLL,
    X_FAR,
    component_posterior,
    inverse_log_ratio,
    mixture_log_ratio,
    scaled_exps,
)
from jaxdp.mechanisms._quadrature import CheckedMoments, mixture_rule, rule_log_moment

__all__ = [
    "LOG_ZERO",
    "NEWTON_MAX_ITER",
    "STACK_CAPACITY",
    "UNROLL",
    "X_FAR",
    "CheckedMoments",
    "component_posterior",
    "gauss_mixture_log_density",
    "inverse_log_ratio",
    "is_stacked",
    "mixture_log_ratio",
    "mixture_rule",
    "rule_log_moment",
    "scaled_exps",
    "scan_parts",
    "scan_stack",
]
