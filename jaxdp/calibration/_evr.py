"""``certify="evr"``: the estimate-verify-release check of a calibrated answer (Monte Carlo, a false-positive rate
instead of a proof)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from jaxdp import accountants as _accountant
from jaxdp.calibration._result import INFEASIBLE, NOT_CERTIFIED
from jaxdp.numerics import validate as _validate

# -- the pieces -----------------------------------------------------------------------------------

#: ``certify=EVR``: estimate-verify-release by the Monte Carlo verifier instead of a certified accountant
EVR = "evr"


def _no_evr_options(key):
    if key is not None:
        raise ValueError("key applies to certify='evr' only.")


def _evr_calibration(calibrator, kwargs, key, tau, mech_of):
    """``certify="evr"``: the estimate calibrated below what the verifier must accept, then verified."""
    if key is None:
        raise ValueError("certify='evr' needs a PRNG key: key=jax.random.key(seed).")
    scalars = {k: v for k, v in kwargs.items() if k not in ("mechanism", "method")}
    if not all(_validate.is_concrete(v) and np.ndim(v) == 0 for v in scalars.values() if v is not None):
        raise ValueError("certify='evr' needs concrete scalar inputs (the verifier runs eagerly).")
    tau = float(tau)
    if not 0.0 < tau < 1.0:
        raise ValueError(f"tau must lie in (0, 1), got {tau!r}.")
    rho = (1.0 + tau) / 2.0
    delta = float(kwargs["delta"])
    delta_est = tau * delta
    estimate = calibrator(**{**kwargs, "delta": 0.9 * delta_est / rho}, certify=None)
    if int(estimate.status) == INFEASIBLE or not np.isfinite(float(estimate.value)):
        return dataclasses.replace(estimate, certify=EVR)
    mech, steps = mech_of(estimate)
    target = float(kwargs["target_epsilon"])
    verdict = _accountant.evr(mech, num_steps=steps, epsilon=target, delta_est=delta_est, tau=tau, key=key)
    accepted = bool(verdict.accepted)
    eps_est = _accountant.epsilon_for_delta(mech, delta=delta, num_steps=steps, method=estimate.method)
    status = int(estimate.status) if accepted else NOT_CERTIFIED
    return dataclasses.replace(
        estimate,
        epsilon_estimate=jnp.asarray(eps_est, jnp.float64),
        epsilon_certified=jnp.asarray(target if accepted else jnp.nan, jnp.float64),
        status=jnp.asarray(status, estimate.status.dtype),
        certify=EVR,
    )
