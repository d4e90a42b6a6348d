"""Closed-form Gaussian accountant against scipy, mpmath and the reference table."""

from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np
import pytest
import reference_values as ref
from _mp_refs import gaussian_delta
from scipy import stats

import jaxdp


def _scipy_delta(mu, eps):
    return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)


@pytest.mark.parametrize("sigma,steps", [(1.0, 1), (0.8, 10), (5.0, 100), (2.0, 3)])
@pytest.mark.parametrize("eps", [0.0, 0.5, 1.0, 2.0])
def test_delta_matches_scipy(sigma, steps, eps):
    mu = math.sqrt(steps) / sigma
    want = _scipy_delta(mu, eps)
    got = float(jaxdp.delta_for_epsilon(jaxdp.Gaussian(sigma), epsilon=eps, num_steps=steps, method="exact"))
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("mu,eps", [(0.5, 10.0), (1.0, 12.0), (3.0, 30.0), (0.2, 8.0), (10.0, 120.0)])
def test_tiny_delta_matches_mpmath(mu, eps):
    """Down to delta ~ 1e-300 (scipy's subtraction has no digits left there)."""
    want = gaussian_delta(mu, eps)
    got = float(jaxdp.log_delta_for_epsilon(jaxdp.Gaussian(1 / mu), epsilon=eps, method="exact"))
    assert got == pytest.approx(float(mp.log(want)), rel=1e-10)


def test_log_delta_representable_below_float64_range():
    got = float(jaxdp.log_delta_for_epsilon(jaxdp.Gaussian(1.0), epsilon=50.0, method="exact"))
    want = float(mp.log(gaussian_delta(1.0, 50.0)))
    assert got < -1200 and got == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize("delta", [0.5, 1e-5, 1e-10, 1e-15, 1e-100])
def test_epsilon_inverts_delta(delta):
    m = jaxdp.Gaussian(0.9)
    eps = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=30, method="exact"))
    back = float(mp.log(gaussian_delta(math.sqrt(30) / 0.9, eps)))
    assert back == pytest.approx(math.log(delta), rel=1e-10)


def test_zero_epsilon_when_delta_is_large():
    eps = float(jaxdp.epsilon_for_delta(jaxdp.Gaussian(100.0), delta=0.9, method="exact"))
    assert eps == 0.0


def test_heterogeneous_gaussian_composition_is_one_gaussian():
    comp = jaxdp.Composition.of((jaxdp.Gaussian(1.0), 3), (jaxdp.Gaussian(2.0), 8))
    one = jaxdp.Gaussian(1 / math.sqrt(3 + 8 / 4))
    a = float(jaxdp.epsilon_for_delta(comp, delta=1e-6, method="exact"))
    b = float(jaxdp.epsilon_for_delta(one, delta=1e-6, method="exact"))
    assert a == pytest.approx(b, rel=1e-12)


GAUSS_ROWS = [r for r in ref.ROWS if r["mechanism"] == "gaussian"]


@pytest.mark.parametrize("row", GAUSS_ROWS, ids=lambda r: f"eps={r['epsilon']}")
def test_reference_gaussian_rows(row):
    got = float(
        jaxdp.delta_for_epsilon(
            jaxdp.Gaussian(row["sigma"]), epsilon=row["epsilon"], num_steps=row["steps"], method="exact"
        )
    )
    assert got == pytest.approx(row["closed_form"], rel=1e-9)
    # the FFT oracle agrees with the closed form to ~1e-7 (see reference_values provenance)
    assert got == pytest.approx(row["delta"], rel=1e-6)


def test_exact_rejects_non_gaussian():
    with pytest.raises(ValueError, match="method='exact' does not support PoissonSubsampledGaussian"):
        jaxdp.epsilon_for_delta(jaxdp.PoissonSubsampledGaussian(1.0, 0.1), delta=1e-5, method="exact")


def test_vectorised_delta_curve_is_monotone():
    eps = np.linspace(0, 6, 13)
    d = [float(jaxdp.delta_for_epsilon(jaxdp.Gaussian(1.0), epsilon=e, num_steps=4, method="exact")) for e in eps]
    assert all(x > y for x, y in itertools.pairwise(d))
