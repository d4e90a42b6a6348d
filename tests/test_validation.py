"""Every validation error names the argument and the allowed range."""

from __future__ import annotations

import numpy as np
import pytest

import jaxdp

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("sigma", [0.0, -1.0, NAN, INF])
@pytest.mark.parametrize("cls", [jaxdp.Gaussian, jaxdp.Laplace])
def test_noise_multiplier(cls, sigma):
    with pytest.raises(ValueError, match="noise_multiplier must be"):
        cls(sigma)


@pytest.mark.parametrize("sigma", [0.0, -0.5, NAN])
def test_psg_noise_multiplier(sigma):
    with pytest.raises(ValueError, match="noise_multiplier must be"):
        jaxdp.PoissonSubsampledGaussian(sigma, 0.1)


@pytest.mark.parametrize("q", [0.0, -0.1, 1.0001, NAN, INF])
def test_sampling_prob(q):
    with pytest.raises(ValueError, match=r"sampling_prob must be in \(0, 1\]|sampling_prob must be finite"):
        jaxdp.PoissonSubsampledGaussian(1.0, q)


def test_sampling_prob_one_is_allowed():
    jaxdp.PoissonSubsampledGaussian(1.0, 1.0)


def test_adjacency():
    with pytest.raises(ValueError, match="adjacency must be one of 'remove', 'add', 'add_or_remove'"):
        jaxdp.PoissonSubsampledGaussian(1.0, 0.1, adjacency="replace")


@pytest.mark.parametrize(
    "c,p,match",
    [
        ([0.0, 1.0], [0.5, 0.6], "probs must be >= 0 and sum to 1"),
        ([0.0, 1.0], [-0.5, 1.5], "probs must be >= 0 and sum to 1"),
        ([0.0, -1.0], [0.5, 0.5], "sensitivities must be >= 0"),
        ([0.0, 1.0], [1.0], "same nonzero length"),
        ([], [], "same nonzero length"),
        ([0.0, NAN], [0.5, 0.5], "sensitivities must be finite"),
    ],
)
def test_mixture(c, p, match):
    with pytest.raises(ValueError, match=match):
        jaxdp.MixtureOfGaussians(1.0, c, p)


def test_group_size():
    with pytest.raises(ValueError, match="group_size must be an integer >= 1"):
        jaxdp.MixtureOfGaussians.poisson_group(1.0, 0.1, 0)


def test_composition():
    with pytest.raises(ValueError, match="counts must be an integer >= 1"):
        jaxdp.Composition.of((jaxdp.Gaussian(1.0), 2.5))
    with pytest.raises(ValueError, match="same adjacency"):
        jaxdp.Composition.of(
            (jaxdp.PoissonSubsampledGaussian(1.0, 0.1, adjacency="add"), 1),
            (jaxdp.PoissonSubsampledGaussian(1.0, 0.1, adjacency="remove"), 1),
        )
    with pytest.raises(ValueError, match="at least one mechanism"):
        jaxdp.Composition((), ())


def test_unknown_method_and_mechanism():
    with pytest.raises(ValueError, match="method must be one of 'rdp', 'exact'"):
        jaxdp.epsilon_for_delta(jaxdp.Gaussian(1.0), delta=1e-5, method="magic")
    with pytest.raises(ValueError, match="mechanism must be a jaxdp mechanism"):
        jaxdp.epsilon_for_delta(1.0, delta=1e-5)


def test_num_steps_forms():
    m = jaxdp.Gaussian(1.0)
    # integral floats are accepted; bools, fractions, zero and negatives are not
    jaxdp.epsilon_for_delta(m, delta=1e-5, num_steps=3.0, method="exact")
    for bad in [0, -3, 2.5, NAN]:
        with pytest.raises(ValueError, match="num_steps must be"):
            jaxdp.epsilon_for_delta(m, delta=1e-5, num_steps=bad, method="exact")


def test_renyi_orders():
    with pytest.raises(ValueError, match="orders must all be > 1"):
        jaxdp.renyi_dp(jaxdp.Gaussian(1.0), orders=[0.5, 2.0])
    with pytest.raises(ValueError, match="orders must be finite"):
        jaxdp.renyi_dp(jaxdp.Gaussian(1.0), orders=[INF])


def test_directions_and_under():
    m = jaxdp.PoissonSubsampledGaussian(1.0, 0.1)
    with pytest.raises(ValueError, match="direction must be 'remove' or 'add'"):
        m.cgf(1.0, "sideways")
    import jax

    with pytest.raises(ValueError, match="under must be 'P' or 'Q'"):
        m.sample_output(jax.random.key(0), (2,), under="R")


@pytest.mark.parametrize(
    "mechanism,kwargs,name",
    [
        (lambda: jaxdp.PoissonSubsampledGaussian(np.array([0.8, 1.0, 2.0]), 0.01), {}, "noise_multiplier"),
        (lambda: jaxdp.PoissonSubsampledGaussian(1.0, np.array([0.01, 0.02])), {}, "sampling_prob"),
        (lambda: jaxdp.PoissonSubsampledGaussian(1.0, 0.01), {"num_steps": np.array([10, 100])}, "num_steps"),
        (lambda: jaxdp.PoissonSubsampledGaussian(1.0, 0.01), {"delta": [1e-5, 1e-6]}, "delta"),
        (lambda: jaxdp.Gaussian(1.0), {"epsilon": np.array([1.0, 2.0])}, "epsilon"),
    ],
)
def test_array_inputs_say_to_map(mechanism, kwargs, name):
    """An array where one configuration's scalar belongs is refused up front, naming the argument and the way to
    ask for many (before, JAX's broadcasting failed deep inside the accountant)."""
    query = {"num_steps": 100, **kwargs}
    if "epsilon" in query:
        entry = jaxdp.delta_for_epsilon
    else:
        entry = jaxdp.epsilon_for_delta
        query.setdefault("delta", 1e-5)
    with pytest.raises(ValueError, match=rf"{name} must be a scalar, got shape .*jax\.vmap"):
        entry(mechanism(), method="rdp", **query)


def test_a_batched_mechanism_under_vmap_is_one_configuration_per_call():
    """The scalar check leaves ``jax.vmap`` over a batched mechanism pytree alone (against the scalar calls)."""
    import jax
    import jax.numpy as jnp

    sigmas = jnp.array([0.8, 1.0, 2.0])
    batched = jax.vmap(lambda m: jaxdp.epsilon_for_delta(m, num_steps=100, delta=1e-5, method="rdp"))(
        jaxdp.PoissonSubsampledGaussian(sigmas, jnp.full(3, 0.01))
    )
    one = [
        float(
            jaxdp.epsilon_for_delta(
                jaxdp.PoissonSubsampledGaussian(float(s), 0.01), num_steps=100, delta=1e-5, method="rdp"
            )
        )
        for s in sigmas
    ]
    np.testing.assert_allclose(np.asarray(batched), one, rtol=1e-5)
