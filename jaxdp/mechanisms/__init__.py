"""Dominating pairs as immutable pytrees: Gaussian, Laplace, mixtures of Gaussians, compositions.

Depends only on :mod:`jaxdp.numerics`.  The accountants use what is exported here and
nothing else, plus the shared internals in :mod:`jaxdp.mechanisms.internal` (see the "Architecture" section of
the README).
"""

from jaxdp.mechanisms._base import AbstractMechanism, Adjacency, Direction, by_direction, is_add
from jaxdp.mechanisms._composition import (
    STACK_CAPACITY,
    Composition,
    as_composition,
    is_stacked,
    scan_parts,
    scan_stack,
    segment,
)
from jaxdp.mechanisms._gaussian import Gaussian
from jaxdp.mechanisms._laplace import Laplace
from jaxdp.mechanisms._log_ratio import component_posterior, inverse_log_ratio, log_ratio, mixture_log_ratio
from jaxdp.mechanisms._mixture import MixtureMechanism, MixtureOfGaussians, PoissonSubsampledGaussian
from jaxdp.mechanisms._quadrature import CheckedMoments, mixture_rule, rule_log_moment

__all__ = [
    "STACK_CAPACITY",
    "AbstractMechanism",
    "Adjacency",
    "CheckedMoments",
    "Composition",
    "Direction",
    "Gaussian",
    "Laplace",
    "MixtureMechanism",
    "MixtureOfGaussians",
    "PoissonSubsampledGaussian",
    "as_composition",
    "by_direction",
    "component_posterior",
    "inverse_log_ratio",
    "is_add",
    "is_stacked",
    "log_ratio",
    "mixture_log_ratio",
    "mixture_rule",
    "rule_log_moment",
    "scan_parts",
    "scan_stack",
    "segment",
]
