"""Schedules: segments of one kind held as one stacked mechanism (issue "Accountants that work inside users'
compiled code", item 2).

The stacked composition must equal the same composition evaluated part by part (the unstacked form, built
without the constructor's grouping), compile once for 1 to ``STACK_CAPACITY`` segments, and accept per-step
arrays with runs merged.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import accountant_programs, central_difference, x64
from _lower_bounds import psg, sum_statistic_log_delta

import jaxdp
from jaxdp.mechanisms import Composition
from jaxdp.mechanisms._composition import _unchecked_composition
from jaxdp.mechanisms.internal import STACK_CAPACITY

SIGMAS = [1.3, 1.1, 0.95, 0.8, 0.7]
QS = [0.004, 0.01, 0.01, 0.02, 0.03]
COUNTS = [300, 200, 250, 150, 100]


def _segments(k):
    return [(jaxdp.PoissonSubsampledGaussian(s, q), n) for s, q, n in list(zip(SIGMAS, QS, COUNTS))[:k]]


def _part_by_part(segs):
    """The composition with one part per segment (the representation before stacking)."""
    return _unchecked_composition(tuple(m for m, _ in segs), tuple(n for _, n in segs))


def test_segments_of_one_kind_are_stacked():
    c = Composition.of(*_segments(3), (jaxdp.Gaussian(4.0), 10))
    assert [type(m).__name__ for m in c.mechanisms] == ["PoissonSubsampledGaussian", "Gaussian"]
    assert [np.shape(n) for n in c.counts] == [(STACK_CAPACITY,), (STACK_CAPACITY,)]
    assert c.num_segments == 4 and c.num_steps == 760
    segs = c.segments()
    assert [float(m.noise_multiplier) for m, _ in segs] == [1.3, 1.1, 0.95, 4.0]
    assert [n for _, n in segs] == [300, 200, 250, 10]
    # a longer schedule takes the next power of two
    long = Composition.of(*[(jaxdp.Gaussian(1.0 + i / 100), 1) for i in range(STACK_CAPACITY + 1)])
    assert np.shape(long.counts[0]) == (2 * STACK_CAPACITY,) and long.num_segments == STACK_CAPACITY + 1


@pytest.mark.parametrize("method", ["saddlepoint", "rdp", "characteristic", "delta2-certified"])
def test_stacked_equals_part_by_part(method):
    segs = _segments(5)
    stacked = Composition.of(*segs)
    ref = _part_by_part(segs)
    for delta in [1e-5, 1e-10]:
        a = float(jaxdp.epsilon_for_delta(stacked, delta=delta, method=method))
        b = float(jaxdp.epsilon_for_delta(ref, delta=delta, method=method))
        assert a == pytest.approx(b, rel=1e-12, abs=0)
    a = float(jaxdp.delta_for_epsilon(stacked, epsilon=1.0, method=method))
    b = float(jaxdp.delta_for_epsilon(ref, epsilon=1.0, method=method))
    assert a == pytest.approx(b, rel=1e-11, abs=0)


def test_stacked_equals_the_closed_form_for_gaussians():
    sigmas, counts = [2.0, 3.0, 5.0], [10, 40, 100]
    c = Composition.of(*[(jaxdp.Gaussian(s), n) for s, n in zip(sigmas, counts)])
    mu = math.sqrt(sum(n / s**2 for s, n in zip(sigmas, counts)))
    got = float(jaxdp.epsilon_for_delta(c, delta=1e-6, method="exact"))
    ref = float(jaxdp.epsilon_for_delta(jaxdp.Gaussian(1.0 / mu), delta=1e-6, method="exact"))
    assert got == pytest.approx(ref, rel=1e-13)


@pytest.mark.slow  # two certified programs (~5 min on two cores); the soundness suite's "hetero" cases are stacks
def test_stacked_certified_fast_equals_part_by_part_and_is_sound():
    segs = _segments(2)
    stacked = Composition.of(*segs)
    a = float(jaxdp.epsilon_for_delta(stacked, delta=1e-8, method="certified-fast"))
    b = float(jaxdp.epsilon_for_delta(_part_by_part(segs), delta=1e-8, method="certified-fast"))
    assert a == pytest.approx(b, rel=1e-10, abs=0)
    # from below: the sum-statistic lower bound (independent of jaxdp) at the returned epsilon
    parts = [psg(float(m.noise_multiplier), float(m.sampling_prob), n) for m, n in segs]
    lower = max(sum_statistic_log_delta(parts, d, a) for d in ["remove", "add"])
    assert lower <= math.log(1e-8) + 1e-9


def test_one_compile_for_1_to_100_segments():
    """The compiled program does not depend on the number of segments (the jitted accountant's compile cache does
    not grow), and each query answers its own schedule.  (The accountant's own program, not one jitted here: the
    same check without a program of its own; the one-Gaussian delta_2 estimate's, since the stacking is the
    constructor's and the accountant's entry point's, not the method's, and the split estimate's stacked program is
    costly to trace again in this module.)"""

    rng = np.random.default_rng(0)
    sizes = []
    previous = None
    with x64():
        for s in [1, 2, 7, 40, 100]:
            sig = rng.uniform(0.8, 2.0, s)
            comp = Composition.from_schedule(
                noise_multipliers=sig, sampling_probs=np.full(s, 0.01), counts=np.full(s, 20)
            )
            eps = float(jaxdp.epsilon_for_delta(comp, delta=1e-5, method="delta2"))
            sizes.append(accountant_programs())
            assert eps != previous
            previous = eps
    assert len(set(sizes)) == 1, sizes


def test_per_step_arrays_merge_runs():
    sig = np.repeat([1.2, 1.0, 1.2], [100, 50, 30])
    qs = np.full(180, 0.02)
    c = Composition.from_schedule(noise_multipliers=sig, sampling_probs=qs)
    assert c.num_segments == 3 and c.num_steps == 180  # the two runs of 1.2 are not adjacent: not merged
    ref = Composition.of(
        (jaxdp.PoissonSubsampledGaussian(1.2, 0.02), 130), (jaxdp.PoissonSubsampledGaussian(1.0, 0.02), 50)
    )
    for method in ["delta2", "rdp"]:  # the merge is Composition.from_schedule's: any accountant shows it
        a = float(jaxdp.epsilon_for_delta(c, delta=1e-6, method=method))
        b = float(jaxdp.epsilon_for_delta(ref, delta=1e-6, method=method))
        assert a == pytest.approx(b, rel=1e-12)
    g = Composition.from_schedule(noise_multipliers=np.array([2.0, 2.0, 3.0]), counts=np.array([5, 5, 10]))
    assert [type(m).__name__ for m, _ in g.segments()] == ["Gaussian", "Gaussian"]
    assert [n for _, n in g.segments()] == [10, 10]


def test_schedule_gradient_matches_finite_differences():
    """Reverse mode through the stacked scan: d eps / d sigma_k of one segment."""
    q, n = 0.01, 200

    def eps(s2):
        comp = Composition.from_schedule(
            noise_multipliers=jnp.stack([jnp.float64(1.2), s2, jnp.float64(0.9)]),
            sampling_probs=jnp.full(3, q),
            counts=jnp.full(3, n),
        )
        return jaxdp.epsilon_for_delta(comp, delta=1e-6, method="saddlepoint")

    with x64():
        g = float(jax.grad(eps)(jnp.float64(1.0)))
        fd = central_difference(lambda s: eps(jnp.float64(s)), 1.0)
    assert g < 0
    assert g == pytest.approx(fd, rel=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"noise_multipliers": np.array([1.0, 2.0]), "sampling_probs": np.array([0.1])}, "sampling_probs"),
        ({"noise_multipliers": np.array([1.0, 2.0]), "counts": np.array([1])}, "counts"),
        ({"noise_multipliers": np.array([]), "counts": None}, "noise_multipliers"),
        ({"noise_multipliers": np.array([1.0, -2.0])}, "noise_multiplier"),
        ({"noise_multipliers": np.array([1.0, 2.0]), "sampling_probs": np.array([0.1, 1.5])}, "sampling_prob"),
        ({"noise_multipliers": np.array([1.0, 2.0]), "counts": np.array([1, 2.5])}, "counts"),
    ],
)
def test_schedule_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Composition.from_schedule(**kwargs)


@pytest.mark.parametrize("method", ["saddlepoint", "delta2-certified", "characteristic"])
def test_one_segment_stack_equals_the_mechanism(method):
    """A stack with one real segment is the i.i.d. composition (the i.i.d. Berry-Esseen constant included)."""
    m = jaxdp.PoissonSubsampledGaussian(1.1, 0.01)
    a = float(jaxdp.epsilon_for_delta(Composition.of((m, 1000)), delta=1e-5, method=method))
    b = float(jaxdp.epsilon_for_delta(m, num_steps=1000, delta=1e-5, method=method))
    assert a == pytest.approx(b, rel=1e-12)
