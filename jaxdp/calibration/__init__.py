"""Calibration of the noise multiplier, sampling rate or number of steps to a privacy budget.

Depends on the public face of :mod:`jaxdp.accountants` and on :mod:`jaxdp.mechanisms` and
:mod:`jaxdp.numerics`.  Its rooms: ``_result`` (the result and its statuses), ``_params`` (each calibrated
hyperparameter once: its log, bracket and query, for both searches), ``_host`` (the search on concrete inputs),
``_traced`` (the search in one program, with implicit gradients), ``_evr`` (the Monte Carlo check), ``_calibrate``
(the three calibrators) and ``_tradeoff`` (the (q, steps) trade-off).
"""

from jaxdp.calibration._calibrate import calibrate_noise_multiplier, calibrate_num_steps, calibrate_sampling_prob
from jaxdp.calibration._result import CalibrationResult
from jaxdp.calibration._tradeoff import TradeoffResult, calibrate

__all__ = [
    "CalibrationResult",
    "TradeoffResult",
    "calibrate",
    "calibrate_noise_multiplier",
    "calibrate_num_steps",
    "calibrate_sampling_prob",
]
