"""Mechanisms: CGFs, privacy losses, samplers, Rényi divergences, pytree behaviour."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from _helpers import complex_log_close, x64
from _mp_refs import laplace_cgf, mixture_cgf
from scipy import stats

import jaxdp

MECHANISMS = {
    "gaussian": lambda: jaxdp.Gaussian(1.3),
    "laplace": lambda: jaxdp.Laplace(0.8),
    "psg": lambda: jaxdp.PoissonSubsampledGaussian(0.9, 0.05),
    "mog": lambda: jaxdp.MixtureOfGaussians(1.2, [0.0, 0.5, 2.0], [0.6, 0.3, 0.1]),
}
DIRECTIONS = ["remove", "add"]


@pytest.mark.parametrize("name", MECHANISMS)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_cgf_normalisation(name, direction):
    """K(0) = 0 and K(-1) = log E_P[e^{-L}] = log E_Q[1] = 0."""
    m = MECHANISMS[name]()
    assert abs(float(m.cgf(0.0, direction))) < 1e-13
    assert abs(float(m.cgf(-1.0, direction))) < 1e-13


@pytest.mark.parametrize("t", [-0.7, -0.5, 0.5, 2.0, 25.0, 0.3 + 1.2j, 4.0 - 3.0j])
@pytest.mark.parametrize("b", [0.3, 1.0, 5.0])
def test_laplace_cgf_matches_mpmath(t, b):
    with x64():
        got = complex(jaxdp.Laplace(b).cgf(jnp.asarray(t, jnp.complex128)))
    ref = complex(laplace_cgf(t, b))
    assert complex_log_close(got, ref, 1e-10)


def test_gaussian_cgf_closed_form():
    with x64():
        m = jaxdp.Gaussian(2.0)
        for t in [0.5, 3.0, 1.5 + 2j]:
            assert complex(m.cgf(t)) == pytest.approx(t * (t + 1) / 8, rel=1e-15)


def test_cgf_cumulants_are_the_cgfs_derivatives():
    """``cgf_cumulants``: ``K`` and its first four derivatives, against the Gaussian's closed form (``K = t (1 + t)
    mu^2 / 2``: cumulants ``(1 + 2 t) mu^2 / 2``, ``mu^2``, 0, 0) and mpmath's numerical derivatives of the Laplace
    CGF's closed form ``t / b + log((1 + e^{-x}) / 2 + (1 - e^{-x}) / (2 b x))``, ``x = (1 + 2 t) / b`` (itself
    checked against quadrature above); symmetric pairs, one CGF for both directions; order 2 is
    ``cgf_derivatives``."""

    def laplace_closed(t, b):
        x = (1 + 2 * t) / b
        return t / b + mp.log((1 + mp.exp(-x)) / 2 + (1 - mp.exp(-x)) / (2 * b * x))

    with x64():
        for direction in ("remove", "add"):
            for t in (0.4, 3.0):
                got = [float(k) for k in jaxdp.Gaussian(2.0).cgf_cumulants(t, direction)]
                want = [t * (1 + t) / 8, (1 + 2 * t) / 8, 0.25, 0.0, 0.0]
                assert got == pytest.approx(want, rel=1e-14, abs=1e-14)
            for b, t in ((1.0, 0.4), (5.0, 3.0)):
                m = jaxdp.Laplace(b)
                got = [float(k) for k in m.cgf_cumulants(t, direction)]
                with mp.workdps(40):
                    want = [float(mp.diff(lambda s, b=b: laplace_closed(s, mp.mpf(b)), mp.mpf(t), n)) for n in range(5)]
                assert abs(want[0] - float(laplace_cgf(t, b).real)) < 1e-12  # (the closed form is the quadrature's)
                scale = max(abs(w) for w in want[1:])
                assert got == pytest.approx(want, rel=1e-9, abs=1e-10 * scale)
                assert [float(k) for k in m.cgf_derivatives(t, direction)] == got[:3]


@pytest.mark.parametrize("name", ["psg", "mog"])
def test_add_direction_is_swapped_pair(name):
    """K_add from an independent mpmath integral of the swapped densities."""
    m = MECHANISMS[name]()
    log_p, c, s = m.mixture()
    with x64():
        got = float(m.cgf(3.0, "add"))
    ref = float(mixture_cgf(3.0, float(s), list(np.asarray(c)), list(np.exp(np.asarray(log_p))), "add"))
    assert abs(got - ref) <= 1e-10 * abs(ref)


@pytest.mark.parametrize("name", MECHANISMS)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_privacy_loss_is_log_density_ratio(name, direction):
    m = MECHANISMS[name]()
    x = np.linspace(-3, 4, 15)
    if name == "gaussian":
        lp, lq = stats.norm.logpdf(x, 1, 1.3), stats.norm.logpdf(x, 0, 1.3)
    elif name == "laplace":
        lp, lq = stats.laplace.logpdf(x, 1, 0.8), stats.laplace.logpdf(x, 0, 0.8)
    else:
        log_p, c, s = (np.asarray(v) for v in m.mixture())
        mix = np.log(np.sum(np.exp(log_p)[:, None] * stats.norm.pdf(x[None], c[:, None], s), axis=0))
        base = stats.norm.logpdf(x, 0, s)
        lp, lq = (mix, base) if direction == "remove" or m.symmetric else (base, mix)
    if m.symmetric and direction == "add":
        lp, lq = lp, lq  # symmetric pairs: both directions share one privacy-loss distribution
    np.testing.assert_allclose(np.asarray(m.privacy_loss(x, direction)), lp - lq, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", MECHANISMS)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_sampler_moments_match_cgf_derivatives(name, direction):
    """E_P[L] = K'(0), Var_P[L] = K''(0), E_Q[L] = K'(-1), E_P[e^{-L}] = 1.

    Tolerances are 5 standard errors estimated from the samples themselves.
    """
    m = MECHANISMS[name]()
    n = 200_000
    kp, kq = jax.random.split(jax.random.key(0))
    lp = np.asarray(m.sample_privacy_loss(kp, (n,), direction=direction, under="P"))
    lq = np.asarray(m.sample_privacy_loss(kq, (n,), direction=direction, under="Q"))
    with x64():
        k = lambda t: m.cgf(t, direction)  # noqa: E731
        k1_0 = float(jax.grad(k)(0.0))
        k2_0 = float(jax.grad(jax.grad(k))(0.0))
        k1_m1 = float(jax.grad(k)(-1.0))
    se_mean = lp.std() / np.sqrt(n)
    assert abs(lp.mean() - k1_0) < 5 * se_mean
    se_var = np.sqrt(np.mean((lp - lp.mean()) ** 4) - lp.var() ** 2) / np.sqrt(n)
    assert abs(lp.var() - k2_0) < 5 * se_var
    assert abs(lq.mean() - k1_m1) < 5 * lq.std() / np.sqrt(n)
    w = np.exp(-lp)
    assert abs(w.mean() - 1.0) < 5 * w.std() / np.sqrt(n)


def test_cgf_derivatives_are_those_of_the_cgf():
    """``cgf_derivatives`` (a mixture: the tilted mean and variance on one rule's nodes) equals differentiating
    ``cgf`` (self-consistency of two formulations of one quadrature; the sampler test above checks ``cgf``'s
    derivatives against samples).  The mixtures only: the others' are the default, that differentiation itself.
    One program for every case (run eagerly, each small op compiled on its own, it took a minute)."""

    def case(m, direction, ts):
        k = lambda t: m.cgf(t, direction)  # noqa: E731
        got = jax.vmap(lambda t: jnp.stack(m.cgf_derivatives(t, direction)))(ts)
        want = jax.vmap(lambda t: jnp.stack([k(t), jax.grad(k)(t), jax.grad(jax.grad(k))(t)]))(ts)
        return got, want

    def every(ts):
        pairs = [case(MECHANISMS[n](), d, ts) for n in ("psg", "mog") for d in DIRECTIONS]
        return jnp.stack([p[0] for p in pairs]), jnp.stack([p[1] for p in pairs])

    with x64():
        got, want = map(np.asarray, jax.jit(every)(jnp.asarray([0.05, 0.7, 3.0, 11.0], jnp.float64)))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-14)


@pytest.mark.parametrize("alpha", [1.5, 2.0, 7.5, 32.0])
def test_renyi_divergence_matches_mpmath(alpha):
    m = jaxdp.PoissonSubsampledGaussian(0.7, 0.02)
    with x64():
        got = float(m.renyi_divergence(alpha))
    ref = mixture_cgf(alpha - 1, 0.7, [0, 1], [1 - mp.mpf("0.02"), mp.mpf("0.02")]) / (alpha - 1)
    assert abs(got - float(ref)) <= 1e-10 * float(ref)


def test_gaussian_renyi_divergence_closed_form():
    assert float(jaxdp.Gaussian(0.5).renyi_divergence(3.0)) == pytest.approx(3.0 * 4 / 2, rel=1e-14)


def test_poisson_subsampled_gaussian_equals_two_component_mixture():
    a = jaxdp.PoissonSubsampledGaussian(1.1, 0.03)
    b = jaxdp.MixtureOfGaussians(1.1, [0.0, 1.0], [0.97, 0.03])
    for d in DIRECTIONS:
        assert float(a.cgf(4.0, d)) == pytest.approx(float(b.cgf(4.0, d)), rel=1e-13)


def test_q_one_is_the_gaussian_mechanism():
    a = jaxdp.PoissonSubsampledGaussian(1.7, 1.0)
    g = jaxdp.Gaussian(1.7)
    for d in DIRECTIONS:
        assert float(a.cgf(2.5, d)) == pytest.approx(float(g.cgf(2.5)), rel=1e-12)


def test_group_mixture_of_size_one_is_psg():
    a = jaxdp.MixtureOfGaussians.poisson_group(1.0, 0.01, 1)
    b = jaxdp.PoissonSubsampledGaussian(1.0, 0.01)
    assert float(a.cgf(3.0)) == pytest.approx(float(b.cgf(3.0)), rel=1e-13)


def test_composition_cgf_is_count_weighted_sum():
    g, p = jaxdp.Gaussian(1.0), jaxdp.PoissonSubsampledGaussian(1.0, 0.1)
    comp = jaxdp.Composition.of((g, 3), (p, 7))
    for d in DIRECTIONS:
        want = 3 * float(g.cgf(2.0, d)) + 7 * float(p.cgf(2.0, d))
        assert float(comp.cgf(2.0, d)) == pytest.approx(want, rel=1e-13)
    assert comp.directions == ("remove", "add")
    assert jaxdp.Composition.of((g, 2), (jaxdp.Laplace(1.0), 2)).directions == ("remove",)


def test_composition_samples_sum_the_parts():
    comp = jaxdp.Composition.of((jaxdp.Gaussian(2.0), 4), (jaxdp.Gaussian(1.0), 1))
    samples = comp.sample_privacy_loss(jax.random.key(1), (100_000,))
    # Composition of Gaussians: L ~ N(mu^2/2, mu^2) with mu^2 = 4/4 + 1 = 2.
    assert abs(np.asarray(samples).mean() - 1.0) < 5 * np.sqrt(2 / 100_000)


def test_mechanisms_are_pytrees_that_vmap_and_grad():
    with x64():
        sig = jnp.array([0.8, 1.0, 1.5])
        ks = jax.vmap(lambda s: jaxdp.PoissonSubsampledGaussian(s, 0.01).cgf(2.0))(sig)
        loop = [float(jaxdp.PoissonSubsampledGaussian(float(s), 0.01).cgf(2.0)) for s in sig]
        np.testing.assert_allclose(np.asarray(ks), loop, rtol=1e-13)
        # Gradient w.r.t. the whole mechanism returns a mechanism whose field is the
        # (negative) derivative: unflattening must not run the user-facing checks.
        g = jax.grad(lambda m: m.cgf(2.0))(jaxdp.PoissonSubsampledGaussian(1.0, 0.01))
        assert isinstance(g, jaxdp.PoissonSubsampledGaussian)
        assert float(g.noise_multiplier) < 0
    leaves, tree = jax.tree.flatten(jaxdp.MixtureOfGaussians(1.0, [0.0, 1.0], [0.5, 0.5], adjacency="remove"))
    assert len(leaves) == 3
    rebuilt = jax.tree.unflatten(tree, leaves)
    assert rebuilt.adjacency == jaxdp.Adjacency.REMOVE


def test_mechanisms_are_immutable():
    m = jaxdp.Gaussian(1.0)
    with pytest.raises(AttributeError):
        m.noise_multiplier = 2.0


# -- the output law: what the Monte Carlo accountants sample ----------------------------------------------
@pytest.mark.parametrize("name", MECHANISMS)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_output_law_is_the_mechanisms_own_pair(name, direction):
    """The law's loss is the mechanism's ``privacy_loss``, its density integrates to one, and ``E_P[e^{tL}]``
    and ``E_P[e^{theta x}]`` by Gauss-Legendre quadrature of the law's density are ``K(t)`` (the mechanism's CGF) and
    the law's ``log_mgf``: one description of the pair, whichever accountant reads it."""
    m = MECHANISMS[name]()
    law = m.output_law(direction)
    xs = np.linspace(-6.0, 7.0, 41)
    if direction == "remove" or not m.symmetric:
        # (a symmetric mechanism answers "add" with its remove pair; its law may be the mirrored pair: K checks it)
        np.testing.assert_allclose(
            np.asarray(law.loss(xs)), np.asarray(m.privacy_loss(xs, direction)), rtol=1e-12, atol=1e-12
        )
    ell, log_p = law.loss_and_log_density(xs)
    np.testing.assert_allclose(np.asarray(ell), np.asarray(law.loss(xs)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(log_p), np.asarray(law.log_density(xs)), rtol=1e-12, atol=1e-12)

    # Gauss-Legendre on unit cells of [-40, 40] (the Laplace kinks at 0 and 1 are cell edges), evaluated at once
    u, w = np.polynomial.legendre.leggauss(24)
    x = (np.arange(-40.0, 40.0)[:, None] + 0.5 * (u + 1.0)[None, :]).ravel()
    wx = np.tile(0.5 * w, 80)
    dens = wx * np.exp(np.asarray(law.log_density(x)))
    loss = np.asarray(law.loss(x))
    assert dens.sum() == pytest.approx(1.0, abs=1e-11)
    for t in (0.5, 2.0):
        got = np.log(np.sum(dens * np.exp(t * loss)))
        assert got == pytest.approx(float(m.cgf(t, direction)), rel=1e-9, abs=1e-12)
    theta = 0.4
    got = np.log(np.sum(dens * np.exp(theta * x)))
    assert got == pytest.approx(float(law.log_mgf(theta)), rel=1e-10, abs=1e-12)


def test_output_law_needs_a_string_direction_and_a_sampleable_mechanism():
    m = jaxdp.PoissonSubsampledGaussian(1.0, 0.01)
    with pytest.raises(ValueError, match="direction"):
        jax.jit(lambda d: m.output_law(d))(jnp.asarray(True))
    comp = jaxdp.Composition.of((m, 3), (jaxdp.Gaussian(2.0), 2))
    with pytest.raises(NotImplementedError, match="no output law"):
        comp.output_law("remove")


def test_output_laws_take_python_scalars_and_stay_float64_with_x64_off():
    """A law built by hand (``of_mixture``) or by a three-component mixture answers a Python scalar in float64
    under JAX's defaults, as the mechanisms do; so does the base class's ``max_privacy_loss``."""
    import warnings

    from jaxdp.mechanisms import GaussianMixtureLaw

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a float64 request truncated to float32 warns
        mog = jaxdp.MixtureOfGaussians(1.0, [0.0, 1.0, 2.0], [0.5, 0.3, 0.2]).output_law()
        assert mog.loss(1.5).dtype == jnp.float64 and mog.log_density(0.3).dtype == jnp.float64
        r = np.array([0.5, 0.3, 0.2])
        ref = np.log(np.sum(r * np.exp(np.array([0.0, 1.0, 2.0]) * 1.5 - 0.5 * np.array([0.0, 1.0, 4.0]))))
        assert float(mog.loss(1.5)) == pytest.approx(ref, rel=1e-14)
        for direction in DIRECTIONS:
            law = GaussianMixtureLaw.of_mixture(np.log([0.9, 0.1]), np.array([0.0, 1.0]), 1.0, direction)
            assert all(leaf.dtype == jnp.float64 for leaf in jax.tree.leaves(law))
            assert law.log_mgf(0.3).dtype == jnp.float64
        assert jaxdp.Gaussian(1.0).max_privacy_loss().dtype == jnp.float64
