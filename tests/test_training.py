"""jaxdp.training: clipping, noise, masking, Poisson sampling, the privacy tracker and a short training run.

The suite runs with JAX's default x64 off (see conftest), as Flax/optax users run.  Statistical checks state
their tolerance in standard errors.  Accounting checks compare with compositions built independently, segment
by segment, and with the public entry points; ``rdp`` (a certified method that compiles in seconds), and
``delta2`` as the trackers' ``estimate_method`` where the estimate is not the subject, keep the default
run short (the split estimate's stacked programs are costly to trace again here).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxdp
from jaxdp.training import (
    BatchSample,
    PrivacyTracker,
    clip_per_example,
    clipped_grad_sum,
    dp_aggregate,
    fixed_batch_sample,
    nnx_loss,
    per_example_grads,
    poisson_sample,
    private_grad,
)


def _tree_norms(tree):
    leaves = [
        np.asarray(x, np.float64).reshape(np.shape(x)[0], int(np.prod(np.shape(x)[1:])))
        for x in jax.tree_util.tree_leaves(tree)
    ]
    return np.sqrt(sum(np.sum(x**2, axis=1) for x in leaves))


def test_every_clipped_example_has_norm_at_most_c():
    key = jax.random.key(0)
    k1, k2 = jax.random.split(key)
    scales = jnp.logspace(-3, 4, 64)  # norms from far below to far above C
    grads = {
        "w": jax.random.normal(k1, (64, 30, 7)) * scales[:, None, None],
        "b": jax.random.normal(k2, (64, 7)) * scales[:, None],
    }
    for c in (1e-3, 0.1, 1.0, 37.0):
        clipped, norms = jax.jit(lambda g, c=c: clip_per_example(g, l2_norm_clip=c))(grads)
        after = _tree_norms(clipped)
        before = _tree_norms(grads)
        assert np.all(after <= c), (c, after.max())
        np.testing.assert_allclose(np.asarray(norms), before, rtol=1e-5)
        small = before <= c * (1 - 1e-4)
        # examples already within C pass through unchanged; the others end just below C, same direction
        np.testing.assert_allclose(
            _tree_norms({"w": clipped["w"][small], "b": clipped["b"][small]}), before[small], rtol=1e-6
        )
        np.testing.assert_allclose(after[~small & (before > c)], c, rtol=2e-5)


def test_padded_rows_contribute_exactly_zero():
    k1, k2 = jax.random.split(jax.random.key(1))
    real = jax.random.normal(k1, (5, 4)) * 3.0
    junk = jnp.array([[jnp.nan, 1.0, 2.0, 3.0], [jnp.inf, 0.0, 0.0, 0.0], [1e30, 1e30, 1e30, 1e30]])
    padded = jnp.concatenate([real, junk])
    mask = jnp.arange(8) < 5
    tx = dp_aggregate(l2_norm_clip=1.0, noise_multiplier=0.0, expected_batch_size=5.0, key=k2)
    out_padded, _ = jax.jit(lambda g, s: tx.update(g, s, mask=mask))({"w": padded}, tx.init(None))
    out_real, _ = jax.jit(tx.update)({"w": real}, tx.init(None))
    assert np.array_equal(np.asarray(out_padded["w"]), np.asarray(out_real["w"]))  # bit for bit
    assert np.all(np.isfinite(np.asarray(out_padded["w"])))


def test_noise_standard_deviation_is_sigma_times_c():
    # zero gradients: the output times the expected batch size is the noise alone, N(0, (sigma C)^2) per coordinate
    sigma, c, b, d = 1.7, 0.5, 64.0, 200_000
    tx = dp_aggregate(l2_norm_clip=c, noise_multiplier=sigma, expected_batch_size=b, key=jax.random.key(3))
    out, state = jax.jit(tx.update)({"w": jnp.zeros((3, d))}, tx.init(None))
    noise = np.asarray(out["w"], np.float64) * b
    sd = sigma * c
    se_sd = sd / np.sqrt(2 * d)  # standard error of the sample standard deviation
    assert abs(noise.std() - sd) < 5 * se_sd, (noise.std(), sd)
    assert abs(noise.mean()) < 5 * sd / np.sqrt(d)
    # the next step draws fresh noise (the key advances, explicitly, in the state)
    out2, _ = jax.jit(tx.update)({"w": jnp.zeros((3, d))}, state)
    assert abs(np.corrcoef(noise, np.asarray(out2["w"], np.float64) * b)[0, 1]) < 5 / np.sqrt(d)


def test_noise_schedule_follows_the_step_count():
    sched = optax.piecewise_constant_schedule(2.0, {2: 0.5})  # sigma 2, 2, then 1
    tx = dp_aggregate(l2_norm_clip=1.0, noise_multiplier=sched, expected_batch_size=1.0, key=jax.random.key(4))
    state = tx.init(None)
    sds = []
    for _ in range(3):
        out, state = jax.jit(tx.update)({"w": jnp.zeros((1, 100_000))}, state)
        sds.append(float(np.std(np.asarray(out["w"]))))
    np.testing.assert_allclose(sds, [2.0, 2.0, 1.0], rtol=0.02)  # 5 standard errors: 5 / sqrt(2e5) ~ 1.1 %


def test_dp_aggregate_chains_with_an_optimizer_and_matches_a_hand_computation():
    tx = optax.chain(
        dp_aggregate(l2_norm_clip=1.0, noise_multiplier=0.0, expected_batch_size=4.0, key=jax.random.key(0)),
        optax.sgd(0.5),
    )
    g = {"w": jnp.array([[3.0, 4.0], [0.1, 0.2], [0.0, 0.0], [9.0, 9.0]])}
    mask = jnp.array([True, True, True, False])
    upd, _ = jax.jit(lambda g, s: tx.update(g, s, {"w": jnp.zeros(2)}, mask=mask))(g, tx.init({"w": jnp.zeros(2)}))
    expected = -0.5 * (np.array([0.6, 0.8]) * (1 - 1e-5) + np.array([0.1, 0.2])) / 4.0
    np.testing.assert_allclose(np.asarray(upd["w"]), expected, rtol=1e-6)


def test_microbatched_sum_equals_the_direct_per_example_computation():
    k1, k2, k3 = jax.random.split(jax.random.key(5), 3)
    x = jax.random.normal(k1, (300, 6))
    y = jax.random.normal(k2, (300,))
    params = {"w": jax.random.normal(k3, (6,)), "b": jnp.array(0.3)}

    def loss(p, ex):
        return (jnp.dot(p["w"], ex["x"]) + p["b"] - ex["y"]) ** 2

    data = {"x": x, "y": y}
    sample = poisson_sample(jax.random.key(6), num_examples=300, sampling_prob=0.3)
    direct = per_example_grads(loss, params, jax.tree_util.tree_map(lambda a: a[sample.indices], data))
    direct, _ = clip_per_example(direct, l2_norm_clip=1.0, mask=sample.mask)
    direct = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64).sum(axis=0), direct)
    for mb in (1, 7, 64, 300):
        total, stats = jax.jit(
            lambda p, s, mb=mb: clipped_grad_sum(loss, p, data, s, l2_norm_clip=1.0, microbatch_size=mb)
        )(params, sample)
        for k in ("w", "b"):
            np.testing.assert_allclose(np.asarray(total[k]), direct[k], rtol=1e-5, atol=1e-5)
        assert int(stats["size"]) == int(sample.size)
        assert 0.0 <= float(stats["clipped_fraction"]) <= 1.0


def test_poisson_sample_membership_is_bernoulli_q():
    n, q, reps = 500, 0.1, 400
    samples = jax.jit(jax.vmap(lambda k: poisson_sample(k, num_examples=n, sampling_prob=q)))(
        jax.random.split(jax.random.key(7), reps)
    )
    member = np.zeros((reps, n))
    for r in range(reps):
        size = int(samples.size[r])
        idx = np.asarray(samples.indices[r][:size])
        assert np.all(np.diff(idx) > 0)  # distinct, increasing
        assert np.array_equal(np.asarray(samples.mask[r]), np.arange(n) < size)
        member[r, idx] = 1
    sizes = np.asarray(samples.size, np.float64)
    # batch size ~ Binomial(n, q): mean and variance within 5 standard errors
    assert abs(sizes.mean() - n * q) < 5 * np.sqrt(n * q * (1 - q) / reps)
    assert abs(sizes.var() / (n * q * (1 - q)) - 1) < 5 * np.sqrt(2 / reps)
    # each example joins with frequency q; no correlation between two examples
    freq = member.mean(axis=0)
    assert abs(freq.mean() - q) < 5 * np.sqrt(q * (1 - q) / (reps * n))
    assert abs(np.corrcoef(member[:, 0], member[:, 1])[0, 1]) < 5 / np.sqrt(reps)


def test_fixed_batches_are_never_accounted_as_poisson():
    s = fixed_batch_sample(jax.random.key(8), num_examples=50, batch_size=10)
    assert s.sampling == "fixed" and len(set(np.asarray(s.indices).tolist())) == 10
    tracker = PrivacyTracker(delta=1e-5, method="rdp", estimate_method="rdp", target_epsilon=50.0)
    with pytest.raises(ValueError, match="not sampling_prob"):  # a fixed batch has no q of its own
        tracker.record(noise_multiplier=1.0, sampling_prob=0.2, sampling=s.sampling)
    with pytest.raises(ValueError, match="dataset_size"):
        tracker.record(noise_multiplier=1.0, sampling=s.sampling, batch_size=10)
    for _ in range(30):
        tracker.record(noise_multiplier=1.0, sampling=s.sampling, dataset_size=50, batch_size=10)
    # the fixed-batch mechanism (sensitivity 2 x Hypergeometric), independently of the tracker's recording
    mech = jaxdp.MixtureOfGaussians.fixed_batch_group(1.0, dataset_size=50, batch_size=10)
    expected = float(jaxdp.epsilon_for_delta(mech, delta=1e-5, num_steps=30, method="rdp"))
    assert tracker.epsilon() == pytest.approx(expected, rel=1e-9)
    poisson = float(
        jaxdp.epsilon_for_delta(jaxdp.PoissonSubsampledGaussian(1.0, 0.2), delta=1e-5, num_steps=30, method="rdp")
    )
    assert tracker.epsilon() > poisson
    assert tracker.can_step(noise_multiplier=1.0, sampling="fixed", dataset_size=50, batch_size=10)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: dp_aggregate(l2_norm_clip=0.0, noise_multiplier=1.0, expected_batch_size=1, key=None), "l2_norm_clip"),
        (
            lambda: dp_aggregate(l2_norm_clip=1.0, noise_multiplier=-1.0, expected_batch_size=1, key=None),
            "noise_multiplier",
        ),
        (
            lambda: dp_aggregate(l2_norm_clip=1.0, noise_multiplier=1.0, expected_batch_size=0, key=None),
            "expected_batch_size",
        ),
        (lambda: poisson_sample(jax.random.key(0), num_examples=10, sampling_prob=1.5), "sampling_prob"),
        (lambda: poisson_sample(jax.random.key(0), num_examples=0, sampling_prob=0.5), "num_examples"),
        (lambda: fixed_batch_sample(jax.random.key(0), num_examples=5, batch_size=6), "batch_size"),
        (lambda: PrivacyTracker(delta=0.0), "delta"),
        (lambda: PrivacyTracker(delta=1e-5, method="saddlepoint"), "certified"),
        (
            lambda: PrivacyTracker(delta=1e-5).record(noise_multiplier=float("nan"), sampling_prob=0.1),
            "noise_multiplier",
        ),
        (
            lambda: PrivacyTracker(delta=1e-5).record(noise_multiplier=1.0, sampling_prob=0.1, num_steps=1.5),
            "num_steps",
        ),
        (lambda: PrivacyTracker(delta=1e-5).steps_left(noise_multiplier=1.0, sampling_prob=0.1), "target_epsilon"),
    ],
)
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


SCHEDULE = [(1.2, 0.01, 150), (0.9, 0.02, 40), (1.2, 0.01, 60)]


def test_tracker_epsilon_equals_the_entry_point_on_the_same_schedule():
    tracker = PrivacyTracker(delta=1e-5, method="rdp", estimate_method="delta2")
    assert tracker.epsilon() == 0.0
    for sigma, q, n in SCHEDULE:
        for _ in range(n):
            tracker.record(noise_multiplier=sigma, sampling_prob=q)
    assert tracker.num_steps == 250 and tracker.num_segments == 3
    comp = jaxdp.Composition.of(*[(jaxdp.PoissonSubsampledGaussian(s, q), n) for s, q, n in SCHEDULE])
    for method, got in (("rdp", tracker.epsilon()), ("delta2", tracker.epsilon_estimate())):
        ref = float(jaxdp.epsilon_for_delta(comp, delta=1e-5, method=method))
        assert got == pytest.approx(ref, rel=1e-12), method


def test_budget_stop_triggers_at_the_last_step_within_budget():
    sigma, q, target = 1.0, 0.02, 1.5
    tracker = PrivacyTracker(delta=1e-5, target_epsilon=target, method="rdp", estimate_method="rdp")
    tracker.record(noise_multiplier=2.0, sampling_prob=q, num_steps=100)  # a warm-up at another sigma
    steps = 0
    while tracker.can_step(noise_multiplier=sigma, sampling_prob=q):
        tracker.record(noise_multiplier=sigma, sampling_prob=q)
        steps += 1
        assert steps < 100_000

    # independent check with the entry point: within budget after `steps`, over it after one more
    def eps(n):
        comp = jaxdp.Composition.of(
            (jaxdp.PoissonSubsampledGaussian(2.0, q), 100), (jaxdp.PoissonSubsampledGaussian(sigma, q), n)
        )
        return float(jaxdp.epsilon_for_delta(comp, delta=1e-5, method="rdp"))

    assert steps > 10
    assert eps(steps) <= target < eps(steps + 1)
    assert tracker.epsilon() <= target
    # a change of sigma recomputes the horizon: more noise buys more steps
    assert tracker.steps_left(noise_multiplier=4 * sigma, sampling_prob=q) > 0


def test_a_short_private_training_run_lowers_the_loss():
    k1, k2, k3 = jax.random.split(jax.random.key(9), 3)
    n, d = 2000, 10
    w_true = jax.random.normal(k1, (d,))
    x = jax.random.normal(k2, (n, d))
    y = (x @ w_true > 0).astype(jnp.float32)
    data = {"x": x, "y": y}

    def loss(p, ex):
        logit = jnp.dot(p["w"], ex["x"]) + p["b"]
        return optax.sigmoid_binary_cross_entropy(logit, ex["y"])

    q, sigma = 0.05, 1.0
    opt = optax.adam(0.05)
    params = {"w": jnp.zeros(d), "b": jnp.zeros(())}
    opt_state = opt.init(params)

    @jax.jit
    def train_step(params, opt_state, key):
        ks, kn = jax.random.split(key)
        sample = poisson_sample(ks, num_examples=n, sampling_prob=q)
        g, stats = private_grad(
            loss, params, data, sample, kn, l2_norm_clip=1.0, noise_multiplier=sigma, expected_batch_size=q * n
        )
        upd, opt_state = opt.update(g, opt_state, params)
        return optax.apply_updates(params, upd), opt_state, stats["loss"]

    def full_loss(p):
        return float(jnp.mean(jax.vmap(loss, (None, 0))(p, data)))

    tracker = PrivacyTracker(delta=1e-5, method="rdp")
    before = full_loss(params)
    for key in jax.random.split(k3, 60):
        params, opt_state, _ = train_step(params, opt_state, key)
        tracker.record(noise_multiplier=sigma, sampling_prob=q)
    after = full_loss(params)
    assert after < 0.7 * before, (before, after)
    assert 0 < tracker.epsilon() < 10


def test_nnx_per_example_gradients_match_the_single_example_gradient():
    from flax import nnx

    model = nnx.Sequential(nnx.Linear(4, 8, rngs=nnx.Rngs(0)), nnx.relu, nnx.Linear(8, 3, rngs=nnx.Rngs(1)))

    def loss(m, ex):
        return optax.softmax_cross_entropy_with_integer_labels(m(ex["x"]), ex["y"])

    params, pure, merge = nnx_loss(model, loss)
    batch = {"x": jax.random.normal(jax.random.key(2), (5, 4)), "y": jnp.array([0, 1, 2, 0, 1])}
    per_ex = jax.jit(lambda p: per_example_grads(pure, p, batch))(params)
    for i in (0, 3):
        one = jax.grad(pure)(params, jax.tree_util.tree_map(lambda a, i=i: a[i], batch))
        for a, b in zip(jax.tree_util.tree_leaves(per_ex), jax.tree_util.tree_leaves(one)):
            np.testing.assert_allclose(np.asarray(a[i]), np.asarray(b), rtol=1e-5, atol=1e-7)
    assert isinstance(merge(params), nnx.Sequential)


def test_batch_sample_is_a_pytree_that_keeps_its_sampling_kind():
    s = BatchSample(jnp.arange(3), jnp.ones(3, bool), jnp.int32(3), "fixed")
    out = jax.jit(lambda s: s)(s)
    assert out.sampling == "fixed" and int(out.size) == 3


def test_the_accountant_runs_inside_a_jitted_train_step_with_x64_off():
    assert not jax.config.jax_enable_x64  # the suite runs with JAX's default (conftest)
    data = jax.random.normal(jax.random.key(10), (400, 3))

    def loss(w, ex):
        return jnp.sum((w - ex) ** 2)

    @jax.jit
    def step(w, key, sigma, q, steps_done):
        ks, kn = jax.random.split(key)
        s = poisson_sample(ks, num_examples=400, sampling_prob=q)
        g, _ = private_grad(loss, w, data, s, kn, l2_norm_clip=1.0, noise_multiplier=sigma, expected_batch_size=q * 400)
        eps = jaxdp.epsilon_for_delta(
            jaxdp.PoissonSubsampledGaussian(sigma, q), num_steps=steps_done + 1, delta=1e-5, method="saddlepoint"
        )
        return w - 0.1 * g, eps

    w, eps = step(jnp.zeros(3), jax.random.key(11), 1.1, 0.05, 99)
    assert w.dtype == jnp.float32
    ref = float(
        jaxdp.epsilon_for_delta(
            jaxdp.PoissonSubsampledGaussian(np.float32(1.1).item(), np.float32(0.05).item()),
            num_steps=100,
            delta=1e-5,
            method="saddlepoint",
        )
    )
    assert float(eps) == pytest.approx(ref, rel=1e-6) and float(eps) >= np.float32(ref)


def test_linen_models_need_no_adapter():
    from flax import linen as nn

    model = nn.Dense(2)
    params = model.init(jax.random.key(0), jnp.ones(3))

    def loss(p, ex):
        return jnp.sum((model.apply(p, ex["x"]) - ex["y"]) ** 2)

    data = {"x": jax.random.normal(jax.random.key(1), (20, 3)), "y": jnp.zeros((20, 2))}
    s = BatchSample(jnp.arange(20), jnp.arange(20) < 15, jnp.int32(15))
    total, stats = jax.jit(lambda p: clipped_grad_sum(loss, p, data, s, l2_norm_clip=0.5, microbatch_size=8))(params)
    direct, _ = clip_per_example(per_example_grads(loss, params, data), l2_norm_clip=0.5, mask=s.mask)
    for a, b in zip(jax.tree_util.tree_leaves(total), jax.tree_util.tree_leaves(direct)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b).sum(axis=0), rtol=1e-5, atol=1e-6)
    assert int(stats["size"]) == 15


@pytest.mark.parametrize(
    ("sigma", "q", "target"),
    [(1.0, 0.01, 2.0), (3.0, 0.1, 0.9), (0.8, 0.5, 0.5), (2.0, 0.001, 0.05), (0.7, 0.02, 30.0)],
)
def test_steps_left_is_the_largest_count_within_budget(sigma, q, target):
    tracker = PrivacyTracker(delta=1e-6, target_epsilon=target, method="rdp")
    n = tracker.steps_left(noise_multiplier=sigma, sampling_prob=q)

    def eps(k):
        m = jaxdp.PoissonSubsampledGaussian(sigma, q)
        return float(jaxdp.epsilon_for_delta(m, num_steps=k, delta=1e-6, method="rdp"))

    if n == 0:
        assert eps(1) > target
    else:
        assert eps(n) <= target < eps(n + 1), (n, eps(n), eps(n + 1))


def test_a_single_run_is_accounted_as_the_mechanism_and_equals_a_one_segment_stack():
    tracker = PrivacyTracker(delta=1e-5, method="rdp", estimate_method="delta2")
    tracker.record(noise_multiplier=1.1, sampling_prob=0.01, num_steps=700)
    tracker.record(noise_multiplier=1.1, sampling_prob=0.01)
    stack = jaxdp.Composition.of((jaxdp.PoissonSubsampledGaussian(1.1, 0.01), 701))
    for method, got in (("rdp", tracker.epsilon()), ("delta2", tracker.epsilon_estimate())):
        assert got == pytest.approx(float(jaxdp.epsilon_for_delta(stack, delta=1e-5, method=method)), rel=1e-9)


def test_tracker_with_the_default_certified_method_against_the_reference_table():
    """``PrivacyTracker(delta=..., target_epsilon=...)`` as the README writes it: the library's default accountant
    (``certified``), on the reference table's mnist_1.1 row (a run recorded in two calls).  Its epsilon is never
    below the table's (an independent tilted FFT, solved to 1e-5) and no looser than dp_accounting's pessimistic
    PLD; the budget horizon holds the certified value within the target, one more step does not.  (The horizon
    search's starting guess comes from ``estimate_method``: ``rdp`` here, whose program the module has loaded
    already; the default split estimate would add its own, ~20 s.)"""
    import reference_values as ref

    (row,) = [r for r in ref.ROWS if r["case"] == "mnist_1.1"]
    sigma, q, steps = row["sigma"], row["q"], row["steps"]
    tracker = PrivacyTracker(delta=row["delta"], target_epsilon=2.4, estimate_method="rdp")
    assert tracker.method is None  # the library default
    tracker.record(noise_multiplier=sigma, sampling_prob=q, num_steps=steps - 40)
    tracker.record(noise_multiplier=sigma, sampling_prob=q, num_steps=40)
    got = tracker.epsilon()
    assert row["epsilon"] - 1e-5 <= got <= row["dp_accounting_pld"] * (1 + 1e-8), got
    left = tracker.steps_left(noise_multiplier=sigma, sampling_prob=q)

    def certified(n):
        m = jaxdp.PoissonSubsampledGaussian(sigma, q)
        return float(jaxdp.epsilon_for_delta(m, num_steps=n, delta=row["delta"], method="certified"))

    assert 0 < left < steps  # 2.4 is ~1 % above the value at 14,040 steps
    assert certified(steps + left) <= 2.4 < certified(steps + left + 1)
