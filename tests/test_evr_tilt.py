"""The exactly sampled loss tilt (``estimator="tilted-exact"``) and its proven range, which the verifier turns into
a sample count (issue 46; ``docs/evr_tilt.md``).

References: scipy quadrature of the tilt's normaliser, the closed-form Gaussian composition, and the numpy FFT
bracket of ``tests/_fft_reference.py`` for the subsampled Gaussian (both directions) -- none of them jaxdp's."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate
from scipy.stats import norm

import jaxdp
from jaxdp.accountants.montecarlo import _engine, _exact_tilt
from jaxdp.accountants.montecarlo._estimate import parts_of
from tests._fft_reference import psg_log_delta_bracket

KEY = jax.random.key(46)


def _gaussian_delta(sigma, steps, eps):
    mu = math.sqrt(steps) / sigma
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


@pytest.mark.parametrize("sigma,q", [(1.0, 0.01), (0.6, 0.2), (2.0, 0.5), (1.3, 1.0)])
def test_the_binomial_normaliser_is_the_tilts_integral(sigma, q):
    """``log M(t) = log int N(x; 0, s^2) R(x)^{1 + t} dx`` under remove, at whole t (scipy quadrature)."""
    mech = jaxdp.PoissonSubsampledGaussian(sigma, q, adjacency="remove")
    for t in (1, 2, 5, 9):
        with jax.enable_x64(True):
            got = float(_exact_tilt.step_log_m(mech, "remove", jnp.float64(t)))

        def f(x, t=t):
            log_r = np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, math.log(q) + (x - 0.5) / sigma**2)
            return math.exp(norm.logpdf(x, scale=sigma) + (1 + t) * log_r)

        want, _ = integrate.quad(f, -15 * sigma, 1 + t + 15 * sigma, limit=400, epsabs=0, epsrel=1e-12)
        assert got == pytest.approx(math.log(want), abs=1e-9, rel=1e-9), (t, got, math.log(want))


def _chunk_values(mech, steps, direction, eps):
    """Per-sample values ``Z`` of one chunk of the exact tilt at its best tilt, and the proven range there."""
    with jax.enable_x64(True):
        _, parts = parts_of(mech, steps)

        @jax.jit
        def run(mechs, eps):
            ps = tuple(_engine.Part(m, p.count) for m, p in zip(mechs, parts))
            tilt, log_b = _exact_tilt.best_tilt(ps, direction, eps)
            props = _engine.plan_proposals(ps, direction, eps, "tilted-exact", tilt[None])
            loss, log_w = _engine.chunk_samples(ps, direction, "tilted-exact", props, KEY, 0)
            return jnp.exp(_engine.log_h(loss, eps) + log_w), log_b, tilt

        z, log_b, tilt = run(tuple(p.mech for p in parts), jnp.float64(eps))
    return np.asarray(z), float(log_b), float(tilt)


@pytest.mark.parametrize(
    "case",
    [
        ("gaussian", "remove"),  # 16 steps of sigma 4: mu = 1, delta(1) from the closed form
        ("psg", "remove"),
        ("psg", "add"),
    ],
)
def test_every_sample_lies_within_the_proven_range_and_the_mean_is_delta(case):
    """No sample of ``Z`` exceeds the proven range (where a tilt with a looser normaliser, or a table, would), and
    the mean is delta: the closed form for Gaussians, the FFT bracket for the subsampled Gaussian (independent)."""
    kind, direction = case
    if kind == "gaussian":
        mech, steps, eps = jaxdp.Gaussian(4.0), 16, 1.0
        lo = hi = _gaussian_delta(4.0, 16, 1.0)
    else:
        mech, steps, eps = jaxdp.PoissonSubsampledGaussian(1.0, 0.2, adjacency=direction), 20, 1.0
        lo, hi = (math.exp(v) for v in psg_log_delta_bracket(1.0, 0.2, 20, 1.0, direction=direction, lmax=4.0, dx=1e-5))
    z, log_b, tilt = _chunk_values(mech, steps, direction, eps)
    assert tilt > 0 and (tilt == round(tilt) or kind == "gaussian" or direction == "add")
    assert np.all(z >= 0) and np.max(z) <= math.exp(log_b)
    # the range is the saddle-point factor: a few to tens of delta, not the simple estimator's 1
    assert hi < math.exp(log_b) < 100 * hi
    se = np.std(z) / math.sqrt(z.size)
    assert se <= 0.05 * hi  # the tilt is a good proposal: 4,096 samples give delta within a few %
    assert lo - 5 * se <= np.mean(z) <= hi + 5 * se, (np.mean(z), lo, hi, se)


def test_the_add_directions_rejection_keeps_exactly_the_tilt():
    """Under add the tilt is drawn by rejection from ``N(0, s^2)``: its kept draws' mean loss is the tilt's
    ``K'(t)`` (scipy quadrature of the tilted law), and a tilt past the cap is brought back to it."""
    sigma, q, t = 1.0, 0.05, 3.0
    mech = jaxdp.PoissonSubsampledGaussian(sigma, q, adjacency="add")
    with jax.enable_x64(True):
        _, parts = parts_of(mech, 1)
        (prop,) = _exact_tilt.proposals(parts, "add", jnp.float64(t))
        law = mech.output_law("add")
        x, ell = jax.jit(lambda p: _exact_tilt.draw(p, law, KEY, (200_000,)))(prop)
        capped = float(_exact_tilt.whole(parts, "add", jnp.float64(1e3)))
    assert capped == pytest.approx(_exact_tilt.REJECT_LOG / -math.log1p(-q))

    def loss(x):
        return -math.log(1.0 - q + q * math.exp((x - 0.5) / sigma**2))

    def dens(x):
        return norm.pdf(x, scale=sigma) * math.exp(t * loss(x))

    m0 = integrate.quad(dens, -30, 30, epsabs=0, epsrel=1e-12)[0]
    m1 = integrate.quad(lambda x: loss(x) * dens(x), -30, 30, epsabs=0, epsrel=1e-12)[0] / m0
    ell = np.asarray(ell)
    assert abs(ell.mean() - m1) < 5 * ell.std() / math.sqrt(ell.size)
    np.testing.assert_allclose(np.asarray([loss(v) for v in np.asarray(x)[:50]]), ell[:50], rtol=1e-12)


def test_the_verifier_plans_the_exact_tilt_at_the_deltas_dp_sgd_is_released_at():
    """PSG sigma 1, q 0.01, 1,000 steps at delta ~1e-6 (epsilon 2.1245, the issue's setting): the exact tilt's
    proven count is at least 1,000 times below the simple estimator's in the direction that decides."""
    m = jaxdp.PoissonSubsampledGaussian(1.0, 0.01)
    plan = jaxdp.evr_plan(m, num_steps=1000, epsilon=2.1245, delta_est=1e-6)
    assert plan.directions == ("remove", "add") and plan.estimators[0] == "tilted-exact"
    counts = plan.counts[0]
    assert counts["simple"] >= 1000 * counts["tilted-exact"]
    assert 1e5 < counts["tilted-exact"] < 2e6 and float(plan.tilts[0][0]) == round(float(plan.tilts[0][0]))
    assert int(np.max(plan.samples[1])) <= 4096  # the add direction's delta is far below: a chunk proves it
    assert "tilted-exact" in str(plan)


def test_the_exact_tilt_refuses_what_it_cannot_sample():
    with pytest.raises(ValueError, match="tilted-exact"):
        jaxdp.montecarlo_delta(jaxdp.Laplace(1.0), epsilon=1.0, key=KEY, num_samples=10, estimator="tilted-exact")
    with pytest.raises(ValueError, match="no gradient"):
        jaxdp.montecarlo_grad(jaxdp.Gaussian(1.0), epsilon=1.0, key=KEY, num_samples=10, estimator="tilted-exact")


def test_a_subsampled_gaussian_with_q_1_is_drawn_as_the_gaussian():
    """q = 1 under add keeps no draw of the rejection sampler ((1 - q) / R = 0): such a step is the Gaussian, and
    is drawn as one (this hung before: every draw refused, redrawn without end)."""
    eps = 1.0
    truth = _gaussian_delta(4.0, 16, eps)
    for adjacency in ("add", "remove"):
        m = jaxdp.PoissonSubsampledGaussian(4.0, 1.0, adjacency=adjacency)
        est = jaxdp.montecarlo_delta(
            m, epsilon=eps, num_steps=16, key=KEY, num_samples=40_000, estimator="tilted-exact"
        )
        assert abs(float(est.value) - truth) <= 5 * float(est.stderr) and float(est.stderr) < 0.01 * truth
    plan = jaxdp.evr_plan(jaxdp.PoissonSubsampledGaussian(4.0, 1.0), num_steps=16, epsilon=eps, delta_est=truth)
    assert plan.estimators == ("tilted-exact", "tilted-exact")


@pytest.mark.parametrize("tilt", [1.0, 3.0, 14.0, 15.0, 40.0])
def test_the_component_pick_is_the_inverse_cdf_and_stays_on_the_live_components(tilt):
    """The subsampled step's component under remove: the number of cumulative probabilities the uniform reaches
    (numpy's searchsorted on the same table), by comparisons for a short table and a binary search for a long
    one; never past the last live component ``1 + t``, even for a uniform above the rounded sum of the others."""
    _, parts = parts_of(jaxdp.PoissonSubsampledGaussian(0.8, 0.3, adjacency="remove"), 10)
    with jax.enable_x64(True):
        cum = _exact_tilt.proposals(parts, "remove", jnp.float64(tilt))[0].cum
        finite = np.asarray(cum)[np.isfinite(np.asarray(cum))]
        assert finite.size == tilt + 1 and np.all(np.diff(finite) >= 0)  # the components 0 .. 1 + t but the last
        u = np.concatenate(
            [
                np.linspace(0.0, 1.0 - 2.0**-53, 2001),
                finite,
                np.nextafter(finite, 0.0),
                [1.0 - 2.0**-53, np.nextafter(finite[-1], 1.0)],
            ]
        )
        k = np.asarray(_exact_tilt._pick(cum, jnp.asarray(u)))
    np.testing.assert_array_equal(k, np.searchsorted(np.asarray(cum), u, side="right"))
    assert k.min() >= 0 and k.max() == tilt + 1  # (at t = 40 the first components have probability ~0)
