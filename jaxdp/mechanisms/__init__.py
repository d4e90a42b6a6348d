"""Dominating pairs as immutable pytrees: Gaussian, Laplace, mixtures of Gaussians, compositions.

Depends only on :mod:`jaxdp.numerics`.  The accountants use what is exported here and
nothing else, plus the shared internals in :mod:`jaxdp.mechanisms.internal` (see the "Architecture" section of
the README).
"""

from jaxdp.mechanisms._base import AbstractMechanism, Adjacency, Direction, by_direction, is_add
from jaxdp.mechanisms._composition import Composition, as_composition, segment
from jaxdp.mechanisms._gaussian import Gaussian
from jaxdp.mechanisms._laplace import Laplace
from jaxdp.mechanisms._laws import GaussianMixtureLaw, LaplaceLaw
from jaxdp.mechanisms._log_ratio import log_ratio
from jaxdp.mechanisms._mixture import MixtureMechanism, MixtureOfGaussians, PoissonSubsampledGaussian

__all__ = [
    "AbstractMechanism",
    "Adjacency",
    "Composition",
    "Direction",
    "Gaussian",
    "GaussianMixtureLaw",
    "Laplace",
    "LaplaceLaw",
    "MixtureMechanism",
    "MixtureOfGaussians",
    "PoissonSubsampledGaussian",
    "as_composition",
    "by_direction",
    "is_add",
    "log_ratio",
    "segment",
]
