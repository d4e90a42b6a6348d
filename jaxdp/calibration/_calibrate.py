"""Calibration: the noise multiplier, sampling probability or number of steps for a budget.

Each calibration is two solves:

1. **Search** with a fast *estimate* (``method``, by default the characteristic-function
   accountant, ~1e-6 relative) for the parameter whose estimated epsilon is the target.
2. **Never overshoot**: the answer is checked with a *certified* accountant
   (``certify``, by default ``"certified-fast"``: the certified construction on a
   coarser lattice, a proven bound) and moved, by the least amount the measured
   slack calls for, until the certified epsilon is at most the target.  The
   parameter is first moved by the certified method's nudge (``_result.CALIBRATION_NUDGES``, about the
   check's slack), so that one certified evaluation usually suffices.  The number of steps is the largest whole count
   that passes, between a passing and a failing count (usually the estimate's count and the next).

Concrete inputs (up to ``HOST_CONFIGURATIONS``) run both on the host, over the accountants'
per-query programs (a secant search started from the Gaussian pair, :func:`_host_one`): a first
calibration compiles what a first query of each method compiles.  Traced inputs (and larger arrays)
run one program: a safeguarded Newton iteration on the estimate with its own derivative
(:func:`_solve`), then the same check as a ``while_loop``.

Gradients of the calibrated value with respect to the target epsilon, delta
and the fixed hyperparameters are implicit (implicit function theorem on the
estimate's equation ``eps_est(x) = target``, as a custom JVP: free unless asked
for); the certification shift is held constant.  Every function accepts arrays
(broadcast together; traced ones run in one compiled ``lax.map``); the functions
can also be ``jax.vmap``-ped or ``jax.jit``-ted.

The method in full: ``docs/calibration.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np

from jaxdp import accountants as _accountant
from jaxdp.calibration._evr import EVR, _evr_calibration, _no_evr_options
from jaxdp.calibration._host import _host_calibration
from jaxdp.calibration._result import HOST_CONFIGURATIONS, INFEASIBLE, CalibrationResult, _certified_name, _rounding
from jaxdp.calibration._traced import _noise_core, _q_core, _run_batch, _steps_core
from jaxdp.mechanisms import PoissonSubsampledGaussian
from jaxdp.numerics import (
    float64_entry,
)
from jaxdp.numerics import validate as _validate


def _run(solved_for, batch, inputs, method, certify, **static):
    """Validated inputs -> broadcast, flattened -> the host's calibration (concrete, at most ``HOST_CONFIGURATIONS``)
    or one compiled ``lax.map`` (traced, or more configurations) -> :class:`CalibrationResult`.

    ``inputs`` maps names to values in the order ``batch`` takes them (``target_epsilon`` and
    ``delta`` first, then the fixed hyperparameters); the result's other hyperparameters come
    from it (NaN when absent).
    """
    info = _accountant.method_info(method)
    # ("none", as the command line spells it, is None)
    cert = (
        None
        if certify is None or (isinstance(certify, str) and certify.lower() == "none")
        else _certified_name(certify)
    )
    arrays = jnp.broadcast_arrays(*(jnp.asarray(v, jnp.float64) for v in inputs.values()))
    shape = arrays[0].shape
    flat = tuple(a.reshape(-1) for a in arrays)
    if _validate.is_concrete(flat) and flat[0].size <= HOST_CONFIGURATIONS:
        value, eps_e, eps_c, iters, status = _host_calibration(solved_for, flat, info.name, cert, **static)
    else:
        value, eps_e, eps_c, iters, status = _run_batch(batch, flat, method=info.name, certify=cert, **static)
    known = dict(zip(inputs, arrays))
    known[solved_for] = value.reshape(shape)
    nan = jnp.asarray(jnp.nan, jnp.float64)
    result = CalibrationResult(
        known.get("noise_multiplier", nan),
        known.get("sampling_prob", nan),
        known.get("num_steps", nan),
        eps_e.reshape(shape),
        eps_c.reshape(shape),
        iters.reshape(shape),
        status.reshape(shape),
        solved_for,
        info.name,
        cert,
    )
    status = result.status
    if _validate.is_concrete(status) and np.ndim(status) == 0 and int(status) == INFEASIBLE:
        raise ValueError(f"cannot calibrate {solved_for}: {result.message}.")
    return result


@float64_entry(rounding=_rounding)
def calibrate_noise_multiplier(
    *,
    target_epsilon,
    delta,
    num_steps,
    sampling_prob=None,
    mechanism: Callable | None = None,
    method: str = "characteristic",
    certify: str | None = "certified-fast",
    sigma_max=100.0,
    key=None,
    tau: float = 0.9,
) -> CalibrationResult:
    """Smallest noise multiplier whose epsilon (at ``delta``) is at most ``target_epsilon``.

    Args:
      target_epsilon: the budget, ``> 0``.
      delta: in ``(0, 1)``.
      num_steps: a whole number ``>= 1`` (how often the mechanism is applied).
      sampling_prob: Poisson sampling rate in ``(0, 1]`` of the subsampled Gaussian
        (give this or ``mechanism``).
      mechanism: instead, a function ``sigma -> mechanism`` for other families:
        a group mixture, a heterogeneous :class:`~jaxdp.Composition` whose noise
        scales with ``sigma``.  Pass the same function object each time (it is
        part of the compilation key).
      method: the estimate that drives the search (any ``method=`` name).
      certify: the certified accountant of the final check: ``"certified-fast"``
        (the certified construction on a coarser lattice: a proven bound, slightly
        looser, several times faster; ``benchmarks/results/calibrate.md``), ``"certified"``
        (the tightest), ``"delta2-certified"``
        or ``"rdp"`` (looser), or None (``"none"``) to skip it.
      sigma_max: the largest noise multiplier searched.

    ``target_epsilon``, ``delta``, ``sampling_prob`` and ``num_steps`` may be arrays
    (broadcast together, one compiled vectorised call) or traced.

    Returns:
      A :class:`CalibrationResult` (``.noise_multiplier`` is the answer).

    Raises:
      ValueError: for out-of-range concrete arguments, or (for scalar concrete
        inputs) when even ``sigma_max`` does not meet the budget.

    Formal Guarantees:
      With ``certify`` a certified method and ``status`` 0 or 2, the certified
      epsilon at the returned noise multiplier is at most ``target_epsilon``.

    Example:
      >>> import jaxdp
      >>> r = jaxdp.calibrate_noise_multiplier(target_epsilon=8.0, delta=1e-5, sampling_prob=0.01,
      ...                                      num_steps=2000)
      >>> round(float(r.noise_multiplier), 3), float(r.epsilon_certified) <= 8.0
      (0.643, True)
    """
    _validate.positive("target_epsilon", target_epsilon)
    _validate.open_unit("delta", delta)
    _validate.num_steps("num_steps", num_steps)
    _validate.positive("sigma_max", sigma_max)
    if (sampling_prob is None) == (mechanism is None):
        raise ValueError("give exactly one of sampling_prob (Poisson-subsampled Gaussian) or mechanism.")
    if certify == EVR:
        kwargs = dict(
            target_epsilon=target_epsilon,
            delta=delta,
            num_steps=num_steps,
            sampling_prob=sampling_prob,
            mechanism=mechanism,
            method=method,
            sigma_max=sigma_max,
        )

        def mech_of(r):
            s = float(r.noise_multiplier)
            return (mechanism(s) if mechanism is not None else PoissonSubsampledGaussian(s, sampling_prob)), num_steps

        return _evr_calibration(calibrate_noise_multiplier, kwargs, key, tau, mech_of)
    _no_evr_options(key)
    if sampling_prob is not None:
        _validate.probability("sampling_prob", sampling_prob)
    inputs = {
        "target_epsilon": target_epsilon,
        "delta": delta,
        "sampling_prob": 1.0 if sampling_prob is None else sampling_prob,
        "num_steps": num_steps,
        "sigma_max": sigma_max,
    }
    result = _run("noise_multiplier", _noise_core, inputs, method, certify, mechanism=mechanism)
    if mechanism is not None:  # no sampling rate of its own
        result = dataclasses.replace(result, sampling_prob=jnp.asarray(jnp.nan, jnp.float64))
    return result


@float64_entry(rounding=_rounding)
def calibrate_sampling_prob(
    *,
    target_epsilon,
    delta,
    noise_multiplier,
    num_steps,
    method: str = "characteristic",
    certify: str | None = "certified-fast",
    key=None,
    tau: float = 0.9,
) -> CalibrationResult:
    """Largest Poisson sampling rate whose epsilon (at ``delta``) is at most ``target_epsilon``.

    Args:
      target_epsilon: the budget, ``> 0``.
      delta: in ``(0, 1)``.
      noise_multiplier: ``> 0``.
      num_steps: a whole number ``>= 1``.
      method: the estimate that drives the search.
      certify: the certified accountant of the final check, or None (``"none"``)
        (see :func:`calibrate_noise_multiplier`).

    Returns:
      A :class:`CalibrationResult` (``.sampling_prob`` is the answer; status 2
      when ``q = 1`` already meets the budget).

    Raises:
      ValueError: for out-of-range concrete arguments, or (scalar concrete
        inputs) when even ``q = 1e-9`` exceeds the budget.

    Formal Guarantees:
      With ``certify`` a certified method and ``status`` 0 or 2, the certified
      epsilon at the returned rate is at most ``target_epsilon``.

    Example:
      >>> import jaxdp
      >>> r = jaxdp.calibrate_sampling_prob(target_epsilon=8.0, delta=1e-5, noise_multiplier=0.6434,
      ...                                   num_steps=2000)
      >>> round(float(r.sampling_prob), 4), float(r.epsilon_certified) <= 8.0
      (0.01, True)
    """
    _validate.positive("target_epsilon", target_epsilon)
    _validate.open_unit("delta", delta)
    _validate.positive("noise_multiplier", noise_multiplier)
    _validate.num_steps("num_steps", num_steps)
    if certify == EVR:
        kwargs = dict(
            target_epsilon=target_epsilon,
            delta=delta,
            noise_multiplier=noise_multiplier,
            num_steps=num_steps,
            method=method,
        )
        return _evr_calibration(
            calibrate_sampling_prob,
            kwargs,
            key,
            tau,
            lambda r: (PoissonSubsampledGaussian(noise_multiplier, float(r.sampling_prob)), num_steps),
        )
    _no_evr_options(key)
    inputs = {
        "target_epsilon": target_epsilon,
        "delta": delta,
        "noise_multiplier": noise_multiplier,
        "num_steps": num_steps,
    }
    return _run("sampling_prob", _q_core, inputs, method, certify)


@float64_entry(rounding=_rounding)
def calibrate_num_steps(
    *,
    target_epsilon,
    delta,
    noise_multiplier,
    sampling_prob,
    max_steps=10**7,
    method: str = "characteristic",
    certify: str | None = "certified-fast",
    key=None,
    tau: float = 0.9,
) -> CalibrationResult:
    """Largest whole number of steps whose epsilon (at ``delta``) is at most ``target_epsilon``.

    Args:
      target_epsilon: the budget, ``> 0``.
      delta: in ``(0, 1)``.
      noise_multiplier: ``> 0``.
      sampling_prob: in ``(0, 1]``.
      max_steps: the largest number of steps searched (status 2 when it fits).
      method: the estimate that drives the search.
      certify: the certified accountant of the final check, or None (``"none"``)
        (see :func:`calibrate_noise_multiplier`).

    Returns:
      A :class:`CalibrationResult` (``.num_steps`` is the answer, a whole number).

    Raises:
      ValueError: for out-of-range concrete arguments, or (scalar concrete
        inputs) when even one step exceeds the budget.

    Formal Guarantees:
      With ``certify`` a certified method and ``status`` 0 or 2, the certified
      epsilon after the returned number of steps is at most ``target_epsilon``.

    Example:
      >>> import jaxdp
      >>> r = jaxdp.calibrate_num_steps(target_epsilon=8.0, delta=1e-5, noise_multiplier=0.6434,
      ...                               sampling_prob=0.01)
      >>> int(r.num_steps) in range(1990, 2010), float(r.epsilon_certified) <= 8.0
      (True, True)
    """
    _validate.positive("target_epsilon", target_epsilon)
    _validate.open_unit("delta", delta)
    _validate.positive("noise_multiplier", noise_multiplier)
    _validate.probability("sampling_prob", sampling_prob)
    _validate.num_steps("max_steps", max_steps)
    if certify == EVR:
        kwargs = dict(
            target_epsilon=target_epsilon,
            delta=delta,
            noise_multiplier=noise_multiplier,
            sampling_prob=sampling_prob,
            max_steps=max_steps,
            method=method,
        )
        return _evr_calibration(
            calibrate_num_steps,
            kwargs,
            key,
            tau,
            lambda r: (PoissonSubsampledGaussian(noise_multiplier, sampling_prob), int(r.num_steps)),
        )
    _no_evr_options(key)
    inputs = {
        "target_epsilon": target_epsilon,
        "delta": delta,
        "noise_multiplier": noise_multiplier,
        "sampling_prob": sampling_prob,
        "max_steps": max_steps,
    }
    return _run("num_steps", _steps_core, inputs, method, certify)
