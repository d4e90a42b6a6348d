"""Dominating pairs as immutable pytrees: Gaussian, Laplace, mixtures of Gaussians, compositions.

Depends only on :mod:`jaxdp.numerics`.  The accountants use what is exported here and
nothing else (see the "Architecture" section of the README).
"""

from jaxdp.mechanisms._base import AbstractMechanism, Adjacency, Direction
from jaxdp.mechanisms._composition import Composition, as_composition
from jaxdp.mechanisms._gaussian import Gaussian
from jaxdp.mechanisms._laplace import Laplace
from jaxdp.mechanisms._mixture import MixtureMechanism, MixtureOfGaussians, PoissonSubsampledGaussian
from jaxdp.mechanisms._quadrature import CheckedMoments, mixture_rule

__all__ = [
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
    "mixture_rule",
]
