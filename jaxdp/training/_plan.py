"""Calibrate, then train: the noise multiplier of a DP-SGD run from its budget, epochs and batch size."""

from __future__ import annotations

import math
from typing import NamedTuple

from jaxdp.calibration import calibrate_noise_multiplier
from jaxdp.numerics import validate as _validate


class DpSgdPlan(NamedTuple):
    """The hyperparameters of a DP-SGD run that meets a budget (see :func:`calibrate_dpsgd`).

    Attributes:
      noise_multiplier: sigma, the smallest whose *certified* epsilon is within the budget.
      sampling_prob: ``q = batch_size / num_examples`` (Poisson sampling).
      num_steps: ``round(epochs / q)``.
      expected_batch_size: ``q * num_examples`` (the normaliser of the noisy mean).
      epsilon_certified: the certified epsilon of the run (``<= target_epsilon``).
      delta: the delta of the guarantee.
      noise_multiplier_rdp: the sigma an RDP-calibrated tool (Opacus, TF Privacy) would use for the same
        budget (jaxdp's RDP bound, itself slightly tighter than theirs); ``noise_multiplier / noise_multiplier_rdp``
        is the noise saved.
    """

    noise_multiplier: float
    sampling_prob: float
    num_steps: int
    expected_batch_size: float
    epsilon_certified: float
    delta: float
    noise_multiplier_rdp: float


def calibrate_dpsgd(*, target_epsilon, delta, num_examples: int, batch_size, epochs, certify="certified"):
    """The noise multiplier of a Poisson-sampled DP-SGD run from ``(target_epsilon, delta)``, epochs and batch size.

    ``q = batch_size / num_examples``, ``num_steps = round(epochs / q)``, and sigma is the smallest noise
    multiplier whose certified epsilon after ``num_steps`` steps is at most ``target_epsilon``
    (:func:`jaxdp.calibrate_noise_multiplier`).  The RDP-calibrated sigma of the same budget comes with it.
    ``certify`` is by default the certified accountant :class:`~jaxdp.training.PrivacyTracker` reports with, so a
    training run compiles one certified program (kept on disk for the next run: ``jaxdp.numerics.program_cache``).

    Raises:
      ValueError: for out-of-range arguments, or when the certified check cannot confirm the budget.

    Formal Guarantees:
      ``epsilon_certified`` is a proven upper bound (``certify`` is a certified method) and is at most
      ``target_epsilon``: training with these values spends at most the budget.

    Example:
      >>> from jaxdp.training import calibrate_dpsgd
      >>> plan = calibrate_dpsgd(target_epsilon=8.0, delta=1e-5, num_examples=60000, batch_size=256, epochs=10)
      >>> plan.num_steps, plan.epsilon_certified <= 8.0, plan.noise_multiplier < plan.noise_multiplier_rdp
      (2344, True, True)
    """
    _validate.positive("target_epsilon", target_epsilon)
    _validate.open_unit("delta", delta)
    if not isinstance(num_examples, int) or num_examples < 1:
        raise ValueError(f"num_examples must be a whole number >= 1, got {num_examples!r}.")
    _validate.positive("batch_size", batch_size)
    if batch_size > num_examples:
        raise ValueError(f"batch_size must be at most num_examples={num_examples}, got {batch_size!r}.")
    _validate.positive("epochs", epochs)
    q = float(batch_size) / num_examples
    steps = max(1, round(float(epochs) / q))
    r = calibrate_noise_multiplier(
        target_epsilon=target_epsilon, delta=delta, sampling_prob=q, num_steps=steps, certify=certify
    )
    if int(r.status) not in (0, 2) or not float(r.epsilon_certified) <= target_epsilon:
        raise ValueError(f"calibration failed: {r.message}")
    rdp = calibrate_noise_multiplier(
        target_epsilon=target_epsilon, delta=delta, sampling_prob=q, num_steps=steps, method="rdp", certify=None
    )
    sigma_rdp = float(rdp.noise_multiplier)
    return DpSgdPlan(
        noise_multiplier=float(r.noise_multiplier),
        sampling_prob=q,
        num_steps=steps,
        expected_batch_size=q * num_examples,
        epsilon_certified=float(r.epsilon_certified),
        delta=float(delta),
        noise_multiplier_rdp=sigma_rdp if math.isfinite(sigma_rdp) else math.nan,
    )
