"""The accountants' internals that calibration and the training tracker share (as ``equinox.internal``): the
composition-level entry points behind :func:`~jaxdp.epsilon_for_delta`, and the closed-form Gaussian ``log delta``.
Not part of the public surface: they may change without notice."""

from jaxdp.accountants._api import (
    epsilon_of_composition,
    epsilon_of_concrete,
    log_delta_gaussian,
    log_delta_of_composition,
)

__all__ = ["epsilon_of_composition", "epsilon_of_concrete", "log_delta_gaussian", "log_delta_of_composition"]
