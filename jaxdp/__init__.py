"""jaxdp: differentiable differential-privacy accounting in JAX.

Mechanisms are immutable pytrees (dominating pairs); accountants are pure
functions of them that jit, vmap and differentiate with respect to the noise
multiplier and the sampling probability.  All computation is float64.
"""

from jaxdp._accountant import MethodInfo as MethodInfo
from jaxdp._accountant import available_methods as available_methods
from jaxdp._accountant import delta_for_epsilon as delta_for_epsilon
from jaxdp._accountant import epsilon_for_delta as epsilon_for_delta
from jaxdp._accountant import log_delta_for_epsilon as log_delta_for_epsilon
from jaxdp._accountant import method_info as method_info
from jaxdp._accountant import register_method as register_method
from jaxdp._accountant import renyi_dp as renyi_dp
from jaxdp._calibrate import CalibrationResult as CalibrationResult
from jaxdp._calibrate import TradeoffResult as TradeoffResult
from jaxdp._calibrate import calibrate as calibrate
from jaxdp._calibrate import calibrate_noise_multiplier as calibrate_noise_multiplier
from jaxdp._calibrate import calibrate_num_steps as calibrate_num_steps
from jaxdp._calibrate import calibrate_sampling_prob as calibrate_sampling_prob
from jaxdp._mechanisms import AbstractMechanism as AbstractMechanism
from jaxdp._mechanisms import Adjacency as Adjacency
from jaxdp._mechanisms import Composition as Composition
from jaxdp._mechanisms import Gaussian as Gaussian
from jaxdp._mechanisms import Laplace as Laplace
from jaxdp._mechanisms import MixtureOfGaussians as MixtureOfGaussians
from jaxdp._mechanisms import PoissonSubsampledGaussian as PoissonSubsampledGaussian

__version__ = "0.1.0"
