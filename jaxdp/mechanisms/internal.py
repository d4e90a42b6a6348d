"""The mechanisms' internals that the accountants share (as ``equinox.internal``): constants and kernels of the
mixture's log ratio.  Not part of the public surface: they may change without notice."""

from jaxdp.mechanisms._log_ratio import LOG_ZERO, NEWTON_MAX_ITER, UNROLL, X_FAR, scaled_exps

__all__ = ["LOG_ZERO", "NEWTON_MAX_ITER", "UNROLL", "X_FAR", "scaled_exps"]
