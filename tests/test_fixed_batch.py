"""Fixed-batch sampling and group-privacy curves (Ganesh 2024, Thms 3.1 and 3.3; issue 21).

References: scipy's hypergeometric and binomial pmfs, dp_accounting's PLD of the same
``MixtureOfGaussiansDpEvent``, the closed-form PSG equivalence at ``g = 1``, and the
``group_cifar_*`` rows of the reference table (copied into ``tests/reference_values.py``).
"""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest
import scipy.stats

import jaxdp
from jaxdp.accountants._group import group_weights
from jaxdp.cli import main
from tests._helpers import DELTA2_THEN_SPLIT
from tests.reference_values import ROWS

# one small fixed-batch setting, shared so that its programs compile once per worker
N, B, STEPS, DELTA = 1000, 10, 100, 1e-6


@pytest.mark.parametrize(
    ("n", "b", "g", "adjacency"),
    [
        (1000, 10, 1, "add_or_remove"),
        (1000, 10, 3, "remove"),
        (1000, 10, 40, "add"),
        (50000, 500, 16, "add_or_remove"),
        (20, 15, 8, "add_or_remove"),
        (5, 5, 2, "remove"),
    ],
)
def test_hypergeometric_weights_match_scipy(n, b, g, adjacency):
    """``dataset_size`` is the training set's size N: the smaller neighbour has N - g records under remove (and
    add_or_remove), so H ~ Hypergeometric(B, N, g); under add it has N, so H ~ Hypergeometric(B, N + g, g)."""
    m = jaxdp.MixtureOfGaussians.fixed_batch_group(1.0, dataset_size=n, batch_size=b, group_size=g, adjacency=adjacency)
    j = np.arange(min(g, b) + 1)
    population = n + g if adjacency == "add" else n
    expected = scipy.stats.hypergeom(population, g, b).pmf(j)  # B draws from `population` balls, g black
    np.testing.assert_allclose(m.probs, expected, rtol=1e-10, atol=1e-300)
    np.testing.assert_array_equal(m.sensitivities, 2.0 * j)
    c, p = group_weights(g, sampling="fixed", dataset_size=n, batch_size=b, adjacency=adjacency)
    np.testing.assert_allclose(p[-1, : j.size], expected, rtol=1e-10)
    np.testing.assert_array_equal(c, 2.0 * np.arange(min(g, b) + 1))


def test_fixed_batch_law_is_what_the_sampler_draws():
    """The mechanism of ``dataset_size=N`` is the law of the group's members in the batches that
    ``fixed_batch_sample(num_examples=N)`` draws (issue 41, item 4: it was Hypergeometric(B, N + g, g), whose
    mean 0.909 here is 15 standard errors below the sampler's 1.0)."""
    import jax

    from jaxdp.training import fixed_batch_sample

    n, b, g, trials = 50, 10, 5, 20_000
    keys = jax.random.split(jax.random.key(0), trials)
    idx = jax.vmap(lambda k: fixed_batch_sample(k, num_examples=n, batch_size=b).indices)(keys)
    counts = np.asarray((idx < g).sum(axis=1))  # the group: records 0..g-1
    m = jaxdp.MixtureOfGaussians.fixed_batch_group(1.0, dataset_size=n, batch_size=b, group_size=g)
    law = np.asarray(m.probs)
    mean = float(np.dot(law, np.arange(law.size)))
    assert mean == pytest.approx(b * g / n, rel=1e-9)
    assert counts.mean() == pytest.approx(mean, abs=5 * counts.std() / np.sqrt(trials))
    freq = np.bincount(counts, minlength=law.size)[: law.size] / trials
    assert np.all(np.abs(freq - law) <= 5 * np.sqrt(law * (1 - law) / trials) + 1e-12), (freq, law)


@pytest.mark.parametrize(
    ("n", "b", "g", "adjacency"),
    [(1000, 10, 40, "remove"), (20, 15, 8, "add"), (5, 5, 2, "remove"), (300, 299, 30, "add_or_remove")],
)
def test_fixed_batch_weights_dominate_the_exact_law(n, b, g, adjacency):
    """The weights computed in log space bound the exact (integer) law as Lemma 2.9 of Ganesh 2024 needs:
    every tail P(H >= j) at least the exact one, the weights summing to at most 1, and close to the exact law."""
    from fractions import Fraction

    m = jaxdp.MixtureOfGaussians.fixed_batch_group(1.0, dataset_size=n, batch_size=b, group_size=g, adjacency=adjacency)
    small = n if adjacency == "add" else n - g
    exact = [Fraction(math.comb(g, j) * math.comb(small, b - j), math.comb(small + g, b)) for j in range(min(g, b) + 1)]
    got = [Fraction(float(p)) for p in m.probs]
    total = sum(got)
    assert total <= 1
    for j in range(1, len(exact)):  # as MixtureOfGaussians.mixture() sees them: renormalised
        assert sum(got[j:]) / total >= sum(exact[j:]), j
    # each weight within 1e-10 relative, but the lowest present one, which takes the rest (1e-12 absolute)
    low = next(j for j, y in enumerate(exact) if y > 0)
    for j, (x, y) in enumerate(zip(got, exact)):
        assert abs(float(x - y)) <= (1e-12 if j == low else 1e-10 * float(y) + 1e-300), j


def test_fixed_batch_weights_at_a_large_dataset_are_fast():
    """n = 1e7, B = 65,536, g = 8 took 26 s with exact big-integer binomials (issue 41, item 7); log space
    takes milliseconds.  The bound is loose on purpose: it fails only on the old algorithm."""
    import time

    t = time.perf_counter()
    m = jaxdp.MixtureOfGaussians.fixed_batch_group(1.0, dataset_size=10**7, batch_size=65536, group_size=8)
    assert time.perf_counter() - t < 2.0
    j = np.arange(9)
    np.testing.assert_allclose(m.probs, scipy.stats.hypergeom(10**7, 8, 65536).pmf(j), rtol=1e-8)


@pytest.mark.parametrize(("q", "g"), [(0.01, 1), (0.01, 16), (0.3, 5)])
def test_binomial_weights_match_scipy(q, g):
    m = jaxdp.MixtureOfGaussians.poisson_group(1.0, q, g)
    np.testing.assert_allclose(m.probs, scipy.stats.binom(g, q).pmf(np.arange(g + 1)), rtol=1e-12)
    _, p = group_weights(g, sampling_prob=q)
    for k in range(1, g + 1):  # row k - 1: Binomial(k, q), padded with zeros
        np.testing.assert_allclose(p[k - 1, : k + 1], scipy.stats.binom(k, q).pmf(np.arange(k + 1)), rtol=1e-12)
        assert np.all(p[k - 1, k + 1 :] == 0)


# (the split estimate compiles a program per mixture shape, ~70 s cold on two cores: -m slow)
@pytest.mark.parametrize(
    "methods", [("delta2", "rdp"), pytest.param(("saddlepoint",), marks=pytest.mark.slow)]
)
def test_poisson_group_of_one_is_the_subsampled_gaussian(methods):
    psg = jaxdp.PoissonSubsampledGaussian(1.1, 0.02)
    mix = jaxdp.MixtureOfGaussians.poisson_group(1.1, 0.02, 1)
    for method in methods:
        a = float(jaxdp.epsilon_for_delta(psg, delta=1e-6, num_steps=500, method=method))
        b = float(jaxdp.epsilon_for_delta(mix, delta=1e-6, num_steps=500, method=method))
        assert b == pytest.approx(a, rel=1e-9), method


def test_fixed_batch_of_one_is_a_sensitivity_two_mixture():
    """g = 1: the mixture (1 - B/N) N(0, s^2) + B/N N(2, s^2), i.e. the PSG at sigma / 2."""
    # the mechanisms are the subject: the one-Gaussian estimate (its mixture and PSG forms are separate code); the
    # split estimate on mixtures: test_saddlepoint_split.py::test_group_mixtures
    m = jaxdp.MixtureOfGaussians.fixed_batch_group(2.0, dataset_size=N, batch_size=B)
    psg = jaxdp.PoissonSubsampledGaussian(1.0, B / N)
    a = float(jaxdp.epsilon_for_delta(m, delta=DELTA, num_steps=STEPS, method="delta2"))
    b = float(jaxdp.epsilon_for_delta(psg, delta=DELTA, num_steps=STEPS, method="delta2"))
    assert a == pytest.approx(b, rel=1e-9)


def _pld_epsilon(m, steps, delta):
    import dp_accounting as dpa
    from dp_accounting import dp_event as ev

    acc = dpa.pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-3)
    acc.compose(ev.MixtureOfGaussiansDpEvent(float(m.noise_multiplier), list(m.sensitivities), list(m.probs)), steps)
    return acc.get_epsilon(delta)


def test_fixed_batch_against_dp_accounting_pld():
    """dp_accounting's (pessimistic, 1e-3-discretised) PLD of the same mixture: the certified bound is not
    below it by more than its discretisation, and no looser (measured: 14.647160 against 14.647174)."""
    m = jaxdp.MixtureOfGaussians.fixed_batch_group(1.0, dataset_size=N, batch_size=B, group_size=2)
    ref = _pld_epsilon(m, STEPS, DELTA)
    cert = float(jaxdp.epsilon_for_delta(m, delta=DELTA, num_steps=STEPS, method="certified"))
    assert ref * (1 - 1e-4) <= cert <= ref * (1 + 1e-3)


def test_fixed_batch_is_never_below_poisson_at_the_same_rate():
    """The under-report of accounting a fixed batch as Poisson at q = B / n (here ~2.9x)."""
    fixed = jaxdp.MixtureOfGaussians.fixed_batch_group(2.0, dataset_size=N, batch_size=B)
    psg = jaxdp.PoissonSubsampledGaussian(2.0, B / N)
    a = float(jaxdp.epsilon_for_delta(fixed, delta=DELTA, num_steps=STEPS, method="delta2"))
    b = float(jaxdp.epsilon_for_delta(psg, delta=DELTA, num_steps=STEPS, method="delta2"))
    assert a > 1.5 * b


def test_monotone_in_group_size_and_batch_size():
    eps_g = [
        float(
            jaxdp.epsilon_for_delta(
                jaxdp.MixtureOfGaussians.fixed_batch_group(1.5, dataset_size=N, batch_size=B, group_size=g),
                delta=DELTA,
                num_steps=STEPS,
                method="rdp",
            )
        )
        for g in (1, 2, 4, 8)
    ]
    assert np.all(np.diff(eps_g) > 0), eps_g
    eps_b = [
        float(
            jaxdp.epsilon_for_delta(
                jaxdp.MixtureOfGaussians.fixed_batch_group(1.5, dataset_size=N, batch_size=b, group_size=2),
                delta=DELTA,
                num_steps=STEPS,
                method="rdp",
            )
        )
        for b in (1, 5, 20, 100)
    ]
    assert np.all(np.diff(eps_b) > 0), eps_b


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        (dict(dataset_size=10, batch_size=11), "batch_size must be at most dataset_size"),
        (dict(dataset_size=0, batch_size=1), "dataset_size must be an integer >= 1"),
        (dict(dataset_size=10, batch_size=0), "batch_size must be an integer >= 1"),
        (dict(dataset_size=10, batch_size=2, group_size=0), "group_size must be an integer >= 1"),
        (dict(dataset_size=10, batch_size=2, group_size=1.5), "group_size must be an integer >= 1"),
        (dict(dataset_size=10, batch_size=2, group_size=True), "group_size must be an integer >= 1"),
        (dict(dataset_size=10.0, batch_size=2), "dataset_size must be an integer >= 1"),
    ],
)
def test_fixed_batch_validation(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        jaxdp.MixtureOfGaussians.fixed_batch_group(1.0, **kwargs)


def test_fixed_batch_validation_of_sigma():
    with pytest.raises(ValueError, match="noise_multiplier"):
        jaxdp.MixtureOfGaussians.fixed_batch_group(0.0, dataset_size=10, batch_size=2)


def test_group_curve_matches_the_reference_rows_and_the_black_box_is_looser():
    rows = {r["group_size"]: r for r in ROWS if r["case"] == "group_cifar_sigma2"}
    c = jaxdp.group_curve(
        noise_multiplier=2.0, sampling_prob=0.01, num_steps=2000, delta=1e-6, max_group_size=4, method="characteristic"
    )
    assert list(c.group_sizes) == [1, 2, 3, 4]
    for g in (1, 2, 4):
        # the shared table's oracle is solved to ~1.5e-5 in epsilon (dp_accounting's PLD agrees to 6e-6 at g = 2
        # and 4): a 0.1 % error fails here (it passed rel=5e-3)
        assert float(c.epsilon[g - 1]) == pytest.approx(rows[g]["epsilon"], rel=5e-5)
    eps = np.asarray(c.epsilon)
    black = np.asarray(c.black_box_epsilon)
    assert black[0] == pytest.approx(eps[0], rel=1e-9)
    assert np.all(black[1:] > eps[1:])
    assert np.all(np.diff(eps) > 0)
    # the black-box column meets the conversion's condition g e^{(g-1) e} delta_1(e) <= delta where it is
    # evaluated by the accountant (issue 41, item 2: linear interpolation of the concave log delta_1 read it low)
    example = jaxdp.PoissonSubsampledGaussian(2.0, 0.01)
    for g in (2, 3, 4):
        e = float(black[g - 1]) / g
        log_d1 = float(jaxdp.log_delta_for_epsilon(example, epsilon=e, num_steps=2000, method="characteristic"))
        assert math.log(g) + (g - 1) * e + log_d1 <= math.log(1e-6) + 1e-9, g


def test_group_curve_black_box_is_the_exact_conversion_of_a_gaussian():
    """One Gaussian (q = 1, sigma = 10, mu = 0.1), delta = 1e-3: the black-box column against the conversion
    solved in mpmath from the closed form delta_1(e) = Phi(mu/2 - e/mu) - e^e Phi(-mu/2 - e/mu).  It read
    3.6380 at g = 10 against 3.6565 (0.51 % low, issue 41, item 2); now above it, by at most the 1e-7 to
    which the crossing is narrowed."""
    import mpmath as mp

    c = jaxdp.group_curve(
        noise_multiplier=10.0,
        sampling_prob=1.0,
        num_steps=1,
        delta=1e-3,
        max_group_size=10,
        method="delta2",
    )
    mp.mp.dps = 40
    mu, log_target = mp.mpf("0.1"), mp.log(mp.mpf("1e-3"))

    def log_d1(e):
        return mp.log(mp.ncdf(mu / 2 - e / mu) - mp.exp(e) * mp.ncdf(-mu / 2 - e / mu))

    def condition(g, e):
        return mp.log(g) + (g - 1) * e + log_d1(e) - log_target

    for g in (2, 5, 10):
        exact = g * mp.findroot(functools.partial(condition, g), (1e-4, 2), solver="anderson")
        got = float(c.black_box_epsilon[g - 1])
        assert float(exact) * (1 - 1e-12) <= got <= float(exact) * (1 + 1e-6), (g, got, float(exact))


def test_group_curve_validation():
    with pytest.raises(ValueError, match="max_group_size"):
        jaxdp.group_curve(noise_multiplier=1.0, sampling_prob=0.01, num_steps=10, delta=1e-5, max_group_size=0)
    with pytest.raises(ValueError, match="sampling"):
        jaxdp.group_curve(
            noise_multiplier=1.0, sampling_prob=0.01, num_steps=10, delta=1e-5, max_group_size=2, sampling="shuffle"
        )
    with pytest.raises(ValueError, match="delta"):
        jaxdp.group_curve(noise_multiplier=1.0, sampling_prob=0.01, num_steps=10, delta=2.0, max_group_size=2)


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_fixed_batch_epsilon(capsys):
    base = f"epsilon --sigma 2 --steps {STEPS} --delta {DELTA} --method rdp --json"
    fixed = _json(capsys, f"{base} --sampling fixed --dataset-size {N} --batch-size {B}".split())
    poisson = _json(capsys, f"{base} --dataset-size {N} --batch-size {B}".split())
    assert fixed["sampling"] == "fixed" and fixed["batch_size"] == B and fixed["dataset_size"] == N
    assert poisson["q"] == pytest.approx(B / N) and poisson["sampling"] == "poisson"
    m = jaxdp.MixtureOfGaussians.fixed_batch_group(2.0, dataset_size=N, batch_size=B)
    expected = float(jaxdp.epsilon_for_delta(m, delta=DELTA, num_steps=STEPS, method="rdp"))
    assert fixed["epsilon"] == pytest.approx(expected, rel=1e-12)
    assert fixed["epsilon"] > poisson["epsilon"]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        ("epsilon --sigma 1 --steps 10 --delta 1e-5 --sampling fixed --dataset-size 100", "needs --dataset-size and"),
        (
            "epsilon --sigma 1 --steps 10 --delta 1e-5 --sampling fixed --dataset-size 100 --batch-size 10 --q 0.1",
            "not --q",
        ),
        (
            "epsilon --sigma 1 --steps 10 --delta 1e-5 --sampling fixed --dataset-size 100 --batch-size 200",
            "--batch-size",
        ),
        ("epsilon --sigma 1 --steps 10 --delta 1e-5 --dataset-size 100", "go together"),
        ("epsilon --sigma 1 --steps 10 --delta 1e-5 --dataset-size 0 --batch-size 1", "--dataset-size"),
        (
            "calibrate --target-epsilon 2 --delta 1e-5 --steps 10 --sampling fixed --dataset-size 100 --batch-size 10 "
            "--solve-for steps --sigma 1",
            "noise multiplier only",
        ),
        ("group-curve --sigma 1 --q 0.01 --steps 10 --delta 1e-5 --group-size 0", "--group-size must be an integer"),
    ],
)
def test_cli_sampling_errors(capsys, argv, fragment):
    assert main(argv.split()) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and "\n" not in err


def test_cli_calibrate_fixed_batch(capsys):
    r = _json(
        capsys,
        f"calibrate --target-epsilon 3 --delta {DELTA} --steps {STEPS} --sampling fixed --dataset-size {N} "
        f"--batch-size {B} --method delta2 --certify none --json".split(),
    )
    m = jaxdp.MixtureOfGaussians.fixed_batch_group(r["sigma"], dataset_size=N, batch_size=B)
    eps = float(jaxdp.epsilon_for_delta(m, delta=DELTA, num_steps=STEPS, method="delta2"))
    assert eps == pytest.approx(3.0, rel=1e-4)
    assert r["sampling"] == "fixed"


def test_cli_group_curve_outputs_and_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "group.png"
    # the command line's outputs are under test, not the accountant: the one-Gaussian estimate (the split estimate
    # meets group mixtures in test_saddlepoint_split.py, in programs of its own)
    base = f"group-curve --sigma 2 --steps {STEPS} --delta {DELTA} --group-size 3 --method delta2"
    r = _json(capsys, f"{base} --sampling fixed --dataset-size {N} --batch-size {B} --json --plot {plot}".split())
    assert r["group_size"] == [1, 2, 3] and len(r["epsilon"]) == 3 and len(r["poisson_epsilon"]) == 3
    assert all(f > p for f, p in zip(r["epsilon"], r["poisson_epsilon"]))
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(f"{base} --q 0.01 --csv".split()) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "group_size,epsilon,black_box_epsilon,linear_epsilon" and len(lines) == 4


def test_cli_curve_outputs_and_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "curve.png"
    r = _json(
        capsys,
        f"curve --sigma 1 --q 0.01 --steps 200 --delta 1e-5 --points 5 --method saddlepoint "
        f"--certify rdp --json --plot {plot}".split(),
    )
    assert r["steps"][0] == 1 and r["steps"][-1] == 200
    assert np.all(np.diff(r["epsilon"]) > 0)
    assert all(c >= e for c, e in zip(r["epsilon_certified"], r["epsilon"]))  # RDP is looser than the estimate
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_verify_online_and_sweep_take_fixed_batches(capsys, tmp_path):
    import jax

    from jaxdp import cli

    def run(line):
        return cli.run(cli.build_parser().parse_args(line.split()))

    fixed = "--sampling fixed --dataset-size 10 --batch-size 5"
    # add-or-remove takes the neighbour with n = N - 1 = 9 records, so the fixed batch of 5 out of 10 at
    # sigma = 2 is the PSG at (1, 5 / (9 + 1)): an independent Monte Carlo run of that twin
    twin = jaxdp.PoissonSubsampledGaussian(1.0, 0.5)
    ref = jaxdp.montecarlo_delta(twin, epsilon=1.0, num_steps=4, key=jax.random.key(7), num_samples=200_000)
    _, rec = run(f"verify --sigma 2 --steps 4 --epsilon 1 --delta-est 0.3 --seed 1 --json {fixed}")
    assert rec["sampling"] == "fixed" and rec["q"] == pytest.approx(0.5)
    est = rec["delta_estimate"]
    assert abs(est - float(ref.value)) <= 6 * float(ref.stderr) + 0.02 * float(ref.value)
    _, rec = run(f"online --sigma 4 --steps 3 --delta 1e-3 --samples 20000 --json {fixed}")
    assert rec["sampling"] == "fixed" and rec["steps"] == [1, 2, 3]
    rdp = float(
        jaxdp.epsilon_for_delta(jaxdp.PoissonSubsampledGaussian(2.0, 0.5), delta=1e-3, num_steps=3, method="rdp")
    )
    assert 0 < rec["epsilon"][-1] <= rdp  # under RDP's (proven, looser) bound of the equivalent PSG
    out = tmp_path / "sweep.csv"
    run(
        f"sweep --target-epsilon 4 --delta 1e-5 --steps 300 --method saddlepoint --certify none --out {out} "
        "--sampling fixed --dataset-size 1000 --batch-size 10,20"
    )
    rows = out.read_text().strip().splitlines()
    assert rows[0].startswith("q,steps,sigma") and len(rows) == 3
    for row, b in zip(rows[1:], (10, 20)):
        sigma = float(row.split(",")[2])
        m = jaxdp.MixtureOfGaussians.fixed_batch_group(sigma, dataset_size=1000, batch_size=b)
        eps = float(jaxdp.epsilon_for_delta(m, delta=1e-5, num_steps=300, method="saddlepoint"))
        assert eps == pytest.approx(4.0, rel=1e-4)


# delta_2 in the default run; the split estimate (a program per mixture shape, ~2.5 min cold) with -m slow
@pytest.mark.parametrize("method", DELTA2_THEN_SPLIT)
def test_mixture_values_under_a_users_jit_with_x64_off(method):
    """The default run's check of the next test (-m slow): under a user's jit with x64 off, both mixture
    families give the float64 run's epsilon (their probabilities reach jaxdp rounded to float32)."""
    import jax

    from tests._helpers import x64

    assert not jax.config.jax_enable_x64
    for make in (
        lambda s: jaxdp.MixtureOfGaussians.fixed_batch_group(s, dataset_size=N, batch_size=B, group_size=3),
        lambda s: jaxdp.MixtureOfGaussians.poisson_group(s, 0.01, 4),
    ):
        def eps(s, make=make):
            return jaxdp.epsilon_for_delta(make(s), delta=DELTA, num_steps=STEPS, method=method)

        got = float(jax.jit(eps)(2.0))
        with x64():
            ref = float(eps(2.0))
        assert np.isfinite(got) and got == pytest.approx(ref, rel=1e-6)


def test_mixtures_under_a_users_jit_grad_and_vmap_with_x64_off():
    """The suite runs with JAX's default x64 off: the mixture's probabilities reach jaxdp rounded to float32
    (they used to fail the validity check's 1e-9 and give NaN); the values match the float64 run."""
    import jax
    import jax.numpy as jnp

    from tests._helpers import central_difference, x64

    assert not jax.config.jax_enable_x64

    def eps(s, make):
        return jaxdp.epsilon_for_delta(make(s), delta=DELTA, num_steps=STEPS, method="saddlepoint")

    # the split estimate's gradient on the fixed-batch group mixture (sensitivities 0, 2, 4, 6) is 0.38 % off
    # finite differences (its quadrature nodes are held fixed for the derivative; they move with sigma in the
    # difference): a known shortfall (the target is 1e-5), 1e-8 on the Poisson group mixture
    for make, fd_rtol in (
        (lambda s: jaxdp.MixtureOfGaussians.fixed_batch_group(s, dataset_size=N, batch_size=B, group_size=3), 5e-3),
        (lambda s: jaxdp.MixtureOfGaussians.poisson_group(s, 0.01, 4), 1e-4),
    ):
        got = float(jax.jit(lambda s, make=make: eps(s, make))(2.0))
        grad = float(jax.grad(lambda s, make=make: eps(s, make))(2.0))
        vm = np.asarray(jax.vmap(lambda s, make=make: eps(s, make))(jnp.array([2.0, 3.0])))
        with x64():
            ref = float(eps(2.0, make))
            ref3 = float(eps(3.0, make))
            ref_grad = float(jax.grad(lambda s, make=make: eps(s, make))(2.0))
            fd = central_difference(lambda s, make=make: eps(s, make), 2.0)
        assert got == pytest.approx(ref, rel=1e-6)
        assert grad == pytest.approx(ref_grad, rel=1e-4)  # x64 off: the float64 program's gradient
        assert grad == pytest.approx(fd, rel=fd_rtol)
        np.testing.assert_allclose(vm, [ref, ref3], rtol=1e-6)
