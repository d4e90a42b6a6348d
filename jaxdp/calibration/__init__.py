"""Calibration of the noise multiplier, sampling rate or number of steps to a privacy budget.

Depends on the public face of :mod:`jaxdp.accountants` and on :mod:`jaxdp.mechanisms` and
:mod:`jaxdp.numerics`.
"""

from jaxdp.calibration._calibrate import (
    CalibrationResult,
    TradeoffResult,
    calibrate,
    calibrate_noise_multiplier,
    calibrate_num_steps,
    calibrate_sampling_prob,
)

__all__ = [
    "CalibrationResult",
    "TradeoffResult",
    "calibrate",
    "calibrate_noise_multiplier",
    "calibrate_num_steps",
    "calibrate_sampling_prob",
]
