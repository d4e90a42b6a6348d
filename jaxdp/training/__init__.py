"""DP-SGD for JAX, optax and flax.nnx, with the privacy it spends tracked as it trains.

Needs optax (``pip install "jaxdp[train]"``); flax only for :func:`nnx_loss`.  ``_*`` modules are private.
"""

from jaxdp.training._aggregate import DpAggregateState as DpAggregateState
from jaxdp.training._aggregate import clip_per_example as clip_per_example
from jaxdp.training._aggregate import dp_aggregate as dp_aggregate
from jaxdp.training._flax import nnx_loss as nnx_loss
from jaxdp.training._gradients import clipped_grad_sum as clipped_grad_sum
from jaxdp.training._gradients import per_example_grads as per_example_grads
from jaxdp.training._gradients import private_grad as private_grad
from jaxdp.training._plan import DpSgdPlan as DpSgdPlan
from jaxdp.training._plan import calibrate_dpsgd as calibrate_dpsgd
from jaxdp.training._sampling import BatchSample as BatchSample
from jaxdp.training._sampling import fixed_batch_sample as fixed_batch_sample
from jaxdp.training._sampling import poisson_sample as poisson_sample
from jaxdp.training._tracker import PrivacyTracker as PrivacyTracker

__all__ = [
    "BatchSample",
    "DpAggregateState",
    "DpSgdPlan",
    "PrivacyTracker",
    "calibrate_dpsgd",
    "clip_per_example",
    "clipped_grad_sum",
    "dp_aggregate",
    "fixed_batch_sample",
    "nnx_loss",
    "per_example_grads",
    "poisson_sample",
    "private_grad",
]
