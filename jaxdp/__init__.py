"""jaxdp: differentiable differential-privacy accounting in JAX.

Mechanisms are immutable pytrees (dominating pairs); accountants are pure
functions of them that jit, vmap and differentiate with respect to the noise
multiplier and the sampling probability.  All computation is float64.
"""

# The public names are imported on first use (PEP 562): ``import jaxdp`` alone imports no JAX, so that the command
# line answers ``--help``, ``--version`` and bad input in a fraction of a second.

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

#: public name -> the subpackage that defines it
_EXPORTS = {
    **dict.fromkeys(
        (
            "CharacteristicResult",
            "EvrPlan",
            "EvrVerdict",
            "GroupCurve",
            "MethodInfo",
            "MonteCarloEstimate",
            "MonteCarloGradient",
            "OnlineCurve",
            "PrivacyReport",
            "SplitTerms",
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
        ),
        "jaxdp.accountants",
    ),
    **dict.fromkeys(
        (
            "CalibrationResult",
            "TradeoffResult",
            "calibrate",
            "calibrate_noise_multiplier",
            "calibrate_num_steps",
            "calibrate_sampling_prob",
        ),
        "jaxdp.calibration",
    ),
    **dict.fromkeys(
        (
            "AbstractMechanism",
            "Adjacency",
            "Composition",
            "Gaussian",
            "Laplace",
            "MixtureOfGaussians",
            "PoissonSubsampledGaussian",
        ),
        "jaxdp.mechanisms",
    ),
    **dict.fromkeys(
        ("sweep",),
        "jaxdp.numerics",
    ),
}
_SUBPACKAGES = ("accountants", "calibration", "interop", "mechanisms", "numerics", "training")

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        module = _EXPORTS[name]
    elif name in _SUBPACKAGES:
        module = f"jaxdp.{name}"
    else:
        raise AttributeError(f"module 'jaxdp' has no attribute {name!r}")
    import jax

    # the first use may come inside a user's jit: the modules' import-time work must not be traced into it
    with jax.ensure_compile_time_eval():
        imported = importlib.import_module(module)
    value = imported if name in _SUBPACKAGES else getattr(imported, name)
    globals()[name] = value  # (looked up once)
    return value


def __dir__():
    return sorted({*globals(), *_EXPORTS, *_SUBPACKAGES})


if TYPE_CHECKING:  # (for type checkers and editors: the same names, imported eagerly)
    from jaxdp.accountants import CharacteristicResult as CharacteristicResult
    from jaxdp.accountants import EvrPlan as EvrPlan
    from jaxdp.accountants import EvrVerdict as EvrVerdict
    from jaxdp.accountants import GroupCurve as GroupCurve
    from jaxdp.accountants import MethodInfo as MethodInfo
    from jaxdp.accountants import MonteCarloEstimate as MonteCarloEstimate
    from jaxdp.accountants import MonteCarloGradient as MonteCarloGradient
    from jaxdp.accountants import OnlineCurve as OnlineCurve
    from jaxdp.accountants import PrivacyReport as PrivacyReport
    from jaxdp.accountants import SplitTerms as SplitTerms
    from jaxdp.accountants import available_methods as available_methods
    from jaxdp.accountants import bennett_num_samples as bennett_num_samples
    from jaxdp.accountants import characteristic_terms as characteristic_terms
    from jaxdp.accountants import default_method as default_method
    from jaxdp.accountants import delta_for_epsilon as delta_for_epsilon
    from jaxdp.accountants import epsilon_for_delta as epsilon_for_delta
    from jaxdp.accountants import evr as evr
    from jaxdp.accountants import evr_offset as evr_offset
    from jaxdp.accountants import evr_plan as evr_plan
    from jaxdp.accountants import group_curve as group_curve
    from jaxdp.accountants import log_delta_for_epsilon as log_delta_for_epsilon
    from jaxdp.accountants import method_info as method_info
    from jaxdp.accountants import montecarlo_delta as montecarlo_delta
    from jaxdp.accountants import montecarlo_epsilon as montecarlo_epsilon
    from jaxdp.accountants import montecarlo_grad as montecarlo_grad
    from jaxdp.accountants import online_epsilon as online_epsilon
    from jaxdp.accountants import privacy_report as privacy_report
    from jaxdp.accountants import register_method as register_method
    from jaxdp.accountants import renyi_dp as renyi_dp
    from jaxdp.accountants import saddlepoint_terms as saddlepoint_terms
    from jaxdp.accountants import screened as screened
    from jaxdp.accountants import second_moment_bound as second_moment_bound
    from jaxdp.accountants import with_fallback as with_fallback
    from jaxdp.calibration import CalibrationResult as CalibrationResult
    from jaxdp.calibration import TradeoffResult as TradeoffResult
    from jaxdp.calibration import calibrate as calibrate
    from jaxdp.calibration import calibrate_noise_multiplier as calibrate_noise_multiplier
    from jaxdp.calibration import calibrate_num_steps as calibrate_num_steps
    from jaxdp.calibration import calibrate_sampling_prob as calibrate_sampling_prob
    from jaxdp.mechanisms import AbstractMechanism as AbstractMechanism
    from jaxdp.mechanisms import Adjacency as Adjacency
    from jaxdp.mechanisms import Composition as Composition
    from jaxdp.mechanisms import Gaussian as Gaussian
    from jaxdp.mechanisms import Laplace as Laplace
    from jaxdp.mechanisms import MixtureOfGaussians as MixtureOfGaussians
    from jaxdp.mechanisms import PoissonSubsampledGaussian as PoissonSubsampledGaussian
    from jaxdp.numerics import sweep as sweep
