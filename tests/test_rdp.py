"""RDP accountant against dp_accounting's RdpAccountant and the reference table."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
import reference_values as ref
from _mp_refs import mixture_cgf
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

import jaxdp

INTEGER_ORDERS = [2, 3, 4, 5, 8, 16, 32, 64]


def _dp_rdp(event, orders, count=1):
    acc = rdp_lib.RdpAccountant(orders=list(map(float, orders)))
    acc.compose(event, count)
    return np.asarray(acc._rdp)


PSG_CASES = [(0.5, 0.001), (0.65, 0.01), (1.0, 0.01), (2.0, 0.01), (1.1, 0.0042667), (4.0, 0.2)]


@pytest.mark.parametrize("sigma,q", PSG_CASES)
def test_psg_rdp_matches_dp_accounting_at_integer_orders(sigma, q):
    want = _dp_rdp(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), INTEGER_ORDERS)
    got = np.asarray(jaxdp.renyi_dp(jaxdp.PoissonSubsampledGaussian(sigma, q), orders=INTEGER_ORDERS))
    np.testing.assert_allclose(got, want, rtol=1e-8)


def test_psg_rdp_at_fractional_orders_is_exact_and_no_looser_than_dp_accounting():
    """dp_accounting's fractional-order values are upper bounds (4% loose at 1.5);
    ours are the exact divergence, checked against an mpmath integral."""
    orders = [1.5, 2.5, 6.25, 20.5]
    want = _dp_rdp(dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.0)), orders)
    got = np.asarray(jaxdp.renyi_dp(jaxdp.PoissonSubsampledGaussian(1.0, 0.01), orders=orders))
    assert np.all(got <= want * (1 + 1e-8))
    exact = [
        float(mixture_cgf(a - 1, 1.0, [0, 1], [1 - mp.mpf("0.01"), mp.mpf("0.01")]) / (a - 1)) for a in orders
    ]
    np.testing.assert_allclose(got, exact, rtol=1e-10)


def test_gaussian_and_laplace_rdp_match_dp_accounting():
    orders = [1.5, 2.0, 10.0]
    got = np.asarray(jaxdp.renyi_dp(jaxdp.Gaussian(1.3), orders=orders, num_steps=7))
    np.testing.assert_allclose(got, _dp_rdp(dp_event.GaussianDpEvent(1.3), orders, 7), rtol=1e-12)
    got = np.asarray(jaxdp.renyi_dp(jaxdp.Laplace(0.7), orders=orders))
    np.testing.assert_allclose(got, _dp_rdp(dp_event.LaplaceDpEvent(0.7), orders), rtol=1e-8)


EPS_CASES = [
    (0.65, 0.01, 1000, 1e-5),
    (1.0, 0.01, 2000, 1e-5),
    (2.0, 0.01, 10000, 1e-5),
    (1.1, 0.0042667, 14040, 1e-5),
    (0.5, 0.001, 1000, 1e-13),
    (3.0, 0.1, 500, 1e-8),
]


@pytest.mark.parametrize("sigma,q,steps,delta", EPS_CASES)
def test_epsilon_within_one_percent_of_dp_accounting(sigma, q, steps, delta):
    acc = rdp_lib.RdpAccountant()
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    want = acc.get_epsilon(delta)
    m = jaxdp.PoissonSubsampledGaussian(sigma, q)
    got = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=steps, method="rdp"))
    # never looser than dp_accounting by more than 1%; tighter is allowed (real orders)
    assert got <= want * 1.01
    assert got >= want * 0.97


@pytest.mark.parametrize("sigma,q,steps,eps", [(1.0, 0.01, 2000, 2.0), (0.65, 0.01, 500, 4.0), (2.0, 0.01, 1000, 1.0)])
def test_delta_matches_dp_accounting(sigma, q, steps, eps):
    acc = rdp_lib.RdpAccountant()
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    want = acc.get_delta(eps)
    got = float(
        jaxdp.delta_for_epsilon(jaxdp.PoissonSubsampledGaussian(sigma, q), epsilon=eps, num_steps=steps, method="rdp")
    )
    assert got <= want * 1.01
    assert got >= want * 0.5


EPS_ROWS = [r for r in ref.ROWS if r["mechanism"] == "poisson_gaussian" and r["query"] == "epsilon"]


@pytest.mark.parametrize("row", EPS_ROWS, ids=lambda r: f"{r['case']}-{r['steps']}")
def test_rdp_is_an_upper_bound_on_the_reference(row):
    m = jaxdp.PoissonSubsampledGaussian(row["sigma"], row["q"])
    got = float(jaxdp.epsilon_for_delta(m, delta=row["delta"], num_steps=row["steps"], method="rdp"))
    assert got >= row["epsilon"]
    assert got <= row["rdp"] * 1.01


DELTA_ROWS = [r for r in ref.ROWS if r["mechanism"] == "poisson_gaussian" and r["query"] == "delta"]


@pytest.mark.parametrize("row", DELTA_ROWS[::2], ids=lambda r: f"{r['case']}-eps{r['epsilon']}")
def test_rdp_delta_is_an_upper_bound_on_the_reference(row):
    m = jaxdp.PoissonSubsampledGaussian(row["sigma"], row["q"])
    got = float(jaxdp.delta_for_epsilon(m, epsilon=row["epsilon"], num_steps=row["steps"], method="rdp"))
    assert got >= row["delta"]


def test_rdp_upper_bounds_exact_gaussian():
    for delta in [1e-3, 1e-8, 1e-15]:
        exact = float(jaxdp.epsilon_for_delta(jaxdp.Gaussian(2.0), delta=delta, num_steps=50, method="exact"))
        rdp = float(jaxdp.epsilon_for_delta(jaxdp.Gaussian(2.0), delta=delta, num_steps=50, method="rdp"))
        assert exact <= rdp <= exact * 1.25


def test_group_rows_are_upper_bounds():
    rows = [r for r in ref.ROWS if r["mechanism"] == "poisson_gaussian_group" and r["group_size"] in (1, 2, 4)]
    for row in rows[:3]:
        m = jaxdp.MixtureOfGaussians.poisson_group(row["sigma"], row["q"], row["group_size"])
        got = float(jaxdp.epsilon_for_delta(m, delta=row["delta"], num_steps=row["steps"], method="rdp"))
        assert row["epsilon"] <= got <= row["epsilon"] * 1.3
