"""Shared numerics: log-space helpers and the float64 guard, root finders, input validation, pytrees, NUFFT.

The bottom layer of the package: it imports nothing else from jaxdp, and every other
package may use it (see the "Architecture" section of the README).
"""

from jaxdp.numerics import _program_cache as program_cache
from jaxdp.numerics import _validate as validate
from jaxdp.numerics._boundary import DOWN, NEAREST, UP, float64_entry, keep_x64_mode, x64_enabled
from jaxdp.numerics._host import host_bisect, host_largest_satisfying, host_regula_falsi, host_secant_root
from jaxdp.numerics._implicit import (
    implicit_root,
    root_and_value_found_elsewhere,
    root_found_elsewhere,
    value_found_elsewhere,
)
from jaxdp.numerics._logspace import (
    LOG_2PI,
    UNIT_ROUNDOFF,
    argmax,
    argmin,
    float64_scope,
    log1mexp,
    log1p,
    log_ndtr,
    log_sub_exp,
    logsumexp,
    nan_to,
    to_f64,
)
from jaxdp.numerics._nufft import SPREAD, nufft1
from jaxdp.numerics._pytree import pytree_dataclass, traced_once, zeros_of
from jaxdp.numerics._solvers import (
    bisect,
    bracketed_log_newton,
    bracketed_newton,
    bracketed_secant,
    minimize_on_grid,
    safeguarded_newton,
    solve_decreasing,
    with_slope,
)
from jaxdp.numerics._sparse_cond import sparse_cond
from jaxdp.numerics._special import log_interval, log_normal_interval, log_normal_mass, mean_factor
from jaxdp.numerics._sweep import sweep

__all__ = [
    "DOWN",
    "LOG_2PI",
    "NEAREST",
    "SPREAD",
    "UNIT_ROUNDOFF",
    "UP",
    "argmax",
    "argmin",
    "bisect",
    "bracketed_log_newton",
    "bracketed_newton",
    "bracketed_secant",
    "float64_entry",
    "float64_scope",
    "host_bisect",
    "host_largest_satisfying",
    "host_regula_falsi",
    "host_secant_root",
    "implicit_root",
    "keep_x64_mode",
    "log1mexp",
    "log1p",
    "log_interval",
    "log_ndtr",
    "log_normal_interval",
    "log_normal_mass",
    "log_sub_exp",
    "logsumexp",
    "mean_factor",
    "minimize_on_grid",
    "nan_to",
    "nufft1",
    "program_cache",
    "pytree_dataclass",
    "root_and_value_found_elsewhere",
    "root_found_elsewhere",
    "safeguarded_newton",
    "solve_decreasing",
    "sparse_cond",
    "sweep",
    "to_f64",
    "traced_once",
    "validate",
    "value_found_elsewhere",
    "with_slope",
    "x64_enabled",
    "zeros_of",
]
