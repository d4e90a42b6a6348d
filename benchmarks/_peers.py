"""The peers, called the way their users call them (test/benchmark-only dependencies)."""

from __future__ import annotations

import math


def dp_accounting_pld_epsilon(sigma, q, steps, delta, discretization=1e-4):
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=discretization)
    event = dp_event.GaussianDpEvent(sigma)
    if q < 1:
        event = dp_event.PoissonSampledDpEvent(q, event)
    acc.compose(event, steps)
    return acc.get_epsilon(delta)


def dp_accounting_rdp_epsilon(sigma, q, steps, delta):
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant

    acc = rdp_privacy_accountant.RdpAccountant()
    event = dp_event.GaussianDpEvent(sigma)
    if q < 1:
        event = dp_event.PoissonSampledDpEvent(q, event)
    acc.compose(event, steps)
    return acc.get_epsilon(delta)


def prv_accountant_epsilon(sigma, q, steps, delta, eps_error=1e-3):
    """prv_accountant's estimate (it raises at very small delta)."""
    from prv_accountant import PoissonSubsampledGaussianMechanism, PRVAccountant

    prv = PoissonSubsampledGaussianMechanism(noise_multiplier=sigma, sampling_probability=q)
    acc = PRVAccountant(prvs=[prv], max_self_compositions=[steps], eps_error=eps_error, delta_error=delta * 1e-3)
    _, est, _ = acc.compute_epsilon(delta=delta, num_self_compositions=[steps])
    return est if math.isfinite(est) else float("nan")
