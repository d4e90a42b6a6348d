"""RDP accountant against dp_accounting's RdpAccountant, the reference table, and an independent real-order
reference (:func:`_psg_rdp_bound`: the Rényi divergence of the Poisson-subsampled Gaussian by numpy quadrature,
the Canonne-Kamath-Steinke conversion written out here, minimised over real orders by scipy)."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
import reference_values as ref
from _mp_refs import mixture_cgf
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib
from scipy import optimize, special

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


# -- epsilon and delta against the independent real-order reference ----------------------------------------------


def _psg_log_mgf(beta, sigma, q):
    """``log E_Q[(P/Q)^beta]`` for ``P = (1 - q) N(0, s^2) + q N(1, s^2)``, ``Q = N(0, s^2)``: ``beta = alpha`` is
    ``(alpha - 1) D_alpha(P || Q)`` (remove), ``beta = 1 - alpha`` is ``(alpha - 1) D_alpha(Q || P)`` (add).  The
    trapezoid rule in log space over +-40 deviations about the integrand's peak (spectrally accurate here)."""
    z = np.linspace(-40.0, 40.0, 4001)
    for _ in range(2):  # centre the grid on the peak of the integrand
        log_ratio = np.logaddexp(math.log1p(-q), math.log(q) + (2 * sigma * z - 1) / (2 * sigma**2))
        f = beta * log_ratio - 0.5 * z * z
        z = np.linspace(z[np.argmax(f)] - 40.0, z[np.argmax(f)] + 40.0, 8001)
    log_ratio = np.logaddexp(math.log1p(-q), math.log(q) + (2 * sigma * z - 1) / (2 * sigma**2))
    f = beta * log_ratio - 0.5 * z * z
    return float(special.logsumexp(f) + math.log(z[1] - z[0]) - 0.5 * math.log(2 * math.pi))


def _psg_rdp_bound(sigma, q, steps, *, delta=None, epsilon=None):
    """The Rényi-DP bound over real orders ``alpha - 1`` in ``[1e-2, 1e4]``, the worse adjacency direction:
    ``epsilon(delta)`` or ``log delta(epsilon)`` by Canonne, Kamath & Steinke (2020), Prop. 12 / Asoodeh et al.:
    ``log delta = (alpha - 1)(T r(alpha) - eps + log(1 - 1/alpha)) - log alpha``."""

    def at(u, beta_of):
        am1 = math.exp(u)
        alpha = 1.0 + am1
        r = steps * _psg_log_mgf(beta_of(alpha), sigma, q) / am1
        if epsilon is None:
            return r + math.log1p(-1.0 / alpha) - (math.log(delta) + math.log(alpha)) / am1
        return am1 * (r - epsilon + math.log1p(-1.0 / alpha)) - math.log(alpha)

    worst = -math.inf
    for beta_of in (lambda a: a, lambda a: 1.0 - a):  # remove, add
        grid = np.linspace(math.log(1e-2), math.log(1e4), 121)
        vals = [at(u, beta_of) for u in grid]
        i = int(np.clip(np.argmin(vals), 1, len(grid) - 2))
        best = optimize.minimize_scalar(
            lambda u, b=beta_of: at(u, b), bounds=(grid[i - 1], grid[i + 1]), method="bounded", options={"xatol": 1e-9}
        )
        worst = max(worst, min(best.fun, min(vals)))
    return max(worst, 0.0) if epsilon is None else min(worst, 0.0)


def _assert_rdp_matches(got, want, rtol=1e-7):
    """jaxdp's RDP bound equals the reference's (the same bound: both minimise the same curve over real orders),
    to ``rtol`` both ways: the order search and the quadrature are good to ~1e-9 (measured <= 9.3e-10)."""
    assert abs(got - want) <= rtol * abs(want), (got, want, got / want - 1)


EPS_CASES = [
    (0.65, 0.01, 1000, 1e-5),
    (1.0, 0.01, 2000, 1e-5),
    (2.0, 0.01, 10000, 1e-5),
    (1.1, 0.0042667, 14040, 1e-5),
    (0.5, 0.001, 1000, 1e-13),
    (3.0, 0.1, 500, 1e-8),
]


@pytest.mark.parametrize("sigma,q,steps,delta", EPS_CASES)
def test_epsilon_equals_the_real_order_reference_and_is_no_looser_than_dp_accounting(sigma, q, steps, delta):
    acc = rdp_lib.RdpAccountant()
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    peer = acc.get_epsilon(delta)
    m = jaxdp.PoissonSubsampledGaussian(sigma, q)
    got = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=steps, method="rdp"))
    _assert_rdp_matches(got, _psg_rdp_bound(sigma, q, steps, delta=delta))
    # dp_accounting's orders are a subset (its fractional ones upper bounds): never looser than it
    assert got <= peer * (1 + 1e-9)


@pytest.mark.parametrize("sigma,q,steps,eps", [(1.0, 0.01, 2000, 2.0), (0.65, 0.01, 500, 4.0), (2.0, 0.01, 1000, 1.0)])
def test_delta_equals_the_real_order_reference_and_is_no_looser_than_dp_accounting(sigma, q, steps, eps):
    acc = rdp_lib.RdpAccountant()
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    peer = acc.get_delta(eps)
    m = jaxdp.PoissonSubsampledGaussian(sigma, q)
    got = float(jaxdp.log_delta_for_epsilon(m, epsilon=eps, num_steps=steps, method="rdp"))
    _assert_rdp_matches(got, _psg_rdp_bound(sigma, q, steps, epsilon=eps))  # log delta: 1e-7 of ~10
    assert math.exp(got) <= peer * (1 + 1e-9)


@pytest.mark.parametrize("query", ["epsilon", "log_delta"])
def test_the_rdp_checks_reject_a_value_off_by_a_tenth_of_a_percent(query):
    """The assertion above fails on a value 0.1 % below (or above) the reference, which the former checks
    (``got >= want * 0.97`` for epsilon, ``got >= want * 0.5`` for delta) let through."""
    if query == "epsilon":
        want = _psg_rdp_bound(1.0, 0.01, 2000, delta=1e-5)
    else:
        want = _psg_rdp_bound(1.0, 0.01, 2000, epsilon=2.0)
    _assert_rdp_matches(want * (1 + 1e-8), want)  # (it passes what is within the tolerance)
    for wrong in (want * (1 - 1e-3), want * (1 + 1e-3)):
        with pytest.raises(AssertionError):
            _assert_rdp_matches(wrong, want)


EPS_ROWS = [r for r in ref.ROWS if r["mechanism"] == "poisson_gaussian" and r["query"] == "epsilon"]


@pytest.mark.parametrize("row", EPS_ROWS, ids=lambda r: f"{r['case']}-{r['steps']}")
def test_rdp_is_an_upper_bound_on_the_reference(row):
    m = jaxdp.PoissonSubsampledGaussian(row["sigma"], row["q"])
    got = float(jaxdp.epsilon_for_delta(m, delta=row["delta"], num_steps=row["steps"], method="rdp"))
    assert got >= row["epsilon"]
    assert got <= row["rdp"] * (1 + 1e-9)  # dp_accounting's RDP bound: jaxdp optimises over more orders


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
