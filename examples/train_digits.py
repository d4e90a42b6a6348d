"""DP-SGD on scikit-learn's digits with flax.nnx and optax, the privacy tracked as it trains.

    pip install ".[examples]"
    python examples/train_digits.py                 # non-private baseline, then epsilon = 1, 3, 8 (delta = 1e-5)
    python examples/train_digits.py --epsilon 8     # one private setting
    python examples/train_digits.py --non-private   # the baseline alone

For each budget the noise multiplier is calibrated first (``jaxdp.training.calibrate_dpsgd``: the smallest
sigma whose *certified* epsilon after the planned steps is within the budget; the RDP-calibrated sigma an
Opacus-style tool would use is printed beside it).  Training uses Poisson sampling, per-example clipping and
Gaussian noise (``private_grad``); a ``PrivacyTracker`` records every step, reports the estimated epsilon
each epoch and stops the run if one more step would exceed the budget (certified).  The figure shows test
accuracy and epsilon against steps.  No download: the data ship with scikit-learn.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxdp.training import PrivacyTracker, calibrate_dpsgd, nnx_loss, poisson_sample, private_grad

DELTA = 1e-5


def load_digits(seed=0):
    """Digits (1797 images of 8x8 pixels, 10 classes), scaled to [0, 1], split 80 / 20."""
    from sklearn.datasets import load_digits as sk_load
    from sklearn.model_selection import train_test_split

    x, y = sk_load(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    train = {"x": jnp.asarray(x_tr), "y": jnp.asarray(y_tr, jnp.int32)}
    test = {"x": jnp.asarray(x_te), "y": jnp.asarray(y_te, jnp.int32)}
    return train, test


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(64, 128, rngs=rngs)
        self.out = nnx.Linear(128, 10, rngs=rngs)

    def __call__(self, x):
        return self.out(jnp.tanh(self.hidden(x)))


def example_loss(model, ex):
    return optax.softmax_cross_entropy_with_integer_labels(model(ex["x"]), ex["y"])


def make_steps(pure_loss, data, *, num_examples, sampling_prob, l2_norm_clip, noise_multiplier, opt):
    """The jitted private and non-private train steps (the same Poisson batches, the same optimizer)."""
    expected = sampling_prob * num_examples

    # the data are an argument, not a closure: a closed-over array would be baked into the program as a constant
    @jax.jit
    def private_step(params, opt_state, key, data):
        k_sample, k_noise = jax.random.split(key)
        sample = poisson_sample(k_sample, num_examples=num_examples, sampling_prob=sampling_prob)
        grad, stats = private_grad(
            pure_loss,
            params,
            data,
            sample,
            k_noise,
            l2_norm_clip=l2_norm_clip,
            noise_multiplier=noise_multiplier,
            expected_batch_size=expected,
        )
        updates, opt_state = opt.update(grad, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, stats["loss"]

    @jax.jit
    def plain_step(params, opt_state, key, data):
        sample = poisson_sample(key, num_examples=num_examples, sampling_prob=sampling_prob)
        batch = jax.tree_util.tree_map(lambda a: a[sample.indices], data)

        def mean_loss(p):
            losses = jax.vmap(pure_loss, (None, 0))(p, batch)
            return jnp.sum(jnp.where(sample.mask, losses, 0.0)) / jnp.maximum(sample.size, 1)

        loss, grad = jax.value_and_grad(mean_loss)(params)
        updates, opt_state = opt.update(grad, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return (lambda p, o, k: private_step(p, o, k, data)), (lambda p, o, k: plain_step(p, o, k, data))


def accuracy(merge, params, test):
    logits = merge(params)(test["x"])
    return float(jnp.mean(jnp.argmax(logits, axis=-1) == test["y"]))


def run(setting, train, test, args, progress=True):
    """Trains one setting (``None``: non-private); returns a dict of curves and figures."""
    n = int(train["x"].shape[0])
    q = args.batch_size / n
    plan = None
    sigma = 0.0
    t_start = time.perf_counter()
    if setting is not None and args.sigma is not None:
        sigma = args.sigma  # a given noise multiplier: the tracker's budget stop decides how long it trains
    elif setting is not None:
        plan = calibrate_dpsgd(
            target_epsilon=setting, delta=DELTA, num_examples=n, batch_size=args.batch_size, epochs=args.epochs
        )
        sigma = plan.noise_multiplier
    t_calibrated = time.perf_counter()
    steps_per_epoch = round(1 / q)
    num_steps = plan.num_steps if plan else round(args.epochs / q)
    model = MLP(nnx.Rngs(args.seed))
    params, pure_loss, merge = nnx_loss(model, example_loss)
    opt = optax.adam(args.lr)
    opt_state = opt.init(params)
    private_step, plain_step = make_steps(
        pure_loss, train, num_examples=n, sampling_prob=q, l2_norm_clip=args.clip, noise_multiplier=sigma, opt=opt
    )
    step_fn = private_step if setting is not None else plain_step
    tracker = PrivacyTracker(delta=DELTA, target_epsilon=setting, method=args.tracker_method) if setting else None
    curve = {"step": [0], "accuracy": [accuracy(merge, params, test)], "epsilon": [0.0]}
    key = jax.random.key(args.seed + 1)
    bar = _bar(num_steps, f"eps={setting:g}" if setting else "non-private", progress)
    tracker_seconds = 0.0
    step = 0
    stopped_by_budget = False
    while step < num_steps:
        if tracker is not None:
            t = time.perf_counter()
            ok = tracker.can_step(noise_multiplier=sigma, sampling_prob=q)
            tracker_seconds += time.perf_counter() - t
            if not ok:
                stopped_by_budget = True
                break
        key, sub = jax.random.split(key)
        params, opt_state, loss = step_fn(params, opt_state, sub)
        step += 1
        if tracker is not None:
            t = time.perf_counter()
            tracker.record(noise_multiplier=sigma, sampling_prob=q)
            tracker_seconds += time.perf_counter() - t
        if step % steps_per_epoch == 0 or step == num_steps:
            jax.block_until_ready(params)  # (dispatch is asynchronous: finish the step before timing the tracker)
            t = time.perf_counter()
            eps = tracker.epsilon_estimate() if tracker is not None else float("inf")
            tracker_seconds += time.perf_counter() - t
            curve["step"].append(step)
            curve["accuracy"].append(accuracy(merge, params, test))
            curve["epsilon"].append(eps)
            bar.set_postfix(acc=f"{curve['accuracy'][-1]:.3f}", eps=f"{eps:.2f}", loss=f"{float(loss):.3f}")
        bar.update(1)
    bar.close()
    t_trained = time.perf_counter()
    eps_cert = tracker.epsilon() if tracker is not None else float("inf")
    return {
        "setting": setting,
        "plan": plan,
        "sigma": sigma,
        "steps": step,
        "stopped_by_budget": stopped_by_budget,
        "accuracy": curve["accuracy"][-1],
        "epsilon_certified": eps_cert,
        "curve": curve,
        "seconds_calibration": t_calibrated - t_start,
        "seconds_training": t_trained - t_calibrated,
        "seconds_total": time.perf_counter() - t_start,
        "tracker_seconds": tracker_seconds,
        "step_functions": (private_step, plain_step, params, opt_state),
    }


class _NoBar:
    def __init__(self, total, desc):
        self.total, self.desc, self.n, self.post = total, desc, 0, {}

    def update(self, k):
        self.n += k

    def set_postfix(self, **kw):
        print(f"  {self.desc}: step {self.n + 1}/{self.total} " + " ".join(f"{k}={v}" for k, v in kw.items()))

    def close(self):
        pass


def _bar(total, desc, progress):
    if progress:
        try:
            from tqdm.auto import tqdm

            return tqdm(total=total, desc=desc, leave=True)
        except ImportError:
            pass
    return _NoBar(total, desc)


def step_overhead(result, *, repeats=200):
    """Seconds per private step and per non-private step at the same Poisson batch size (after compiling)."""
    private_step, plain_step, params, opt_state = result["step_functions"]
    out = {}
    for name, fn in (("private", private_step), ("plain", plain_step)):
        key = jax.random.key(7)
        jax.block_until_ready(fn(params, opt_state, key))
        t = time.perf_counter()
        for k in jax.random.split(key, repeats):
            res = fn(params, opt_state, k)
        jax.block_until_ready(res)
        out[name] = (time.perf_counter() - t) / repeats
    return out


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for i, r in enumerate(results):
        color = f"C{i}"
        label = "non-private" if r["setting"] is None else f"target eps = {r['setting']:g} (sigma {r['sigma']:.2f})"
        ax1.plot(r["curve"]["step"], r["curve"]["accuracy"], label=label, color=color)
        if r["setting"] is not None:
            ax2.plot(r["curve"]["step"], r["curve"]["epsilon"], label=label, color=color)
            ax2.axhline(r["setting"], color=color, linestyle=":", linewidth=0.8)
    ax1.set(xlabel="step", ylabel="test accuracy", title="digits, flax.nnx MLP")
    ax2.set(xlabel="step", ylabel=f"epsilon (delta = {DELTA:g}, estimate)", title="privacy spent")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epsilon", type=float, help="train one private setting at this epsilon")
    ap.add_argument("--non-private", action="store_true", help="train the non-private baseline alone")
    ap.add_argument("--epochs", type=float, default=30)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument(
        "--sigma",
        type=float,
        help="use this noise multiplier instead of calibrating one (the budget then stops the run)",
    )
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tracker-method", default="certified-fast", help="certified accountant of the budget stop")
    ap.add_argument("--out", default="digits_training.png", help="the figure (PNG)")
    ap.add_argument("--no-progress", action="store_true")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.epsilon is not None and args.epsilon <= 0:
        raise SystemExit("--epsilon must be > 0")
    settings = [None] if args.non_private else ([args.epsilon] if args.epsilon else [None, 1.0, 3.0, 8.0])
    train, test = load_digits(args.seed)
    results = [run(s, train, test, args, progress=not args.no_progress) for s in settings]
    print()
    print(
        "| setting | sigma (jaxdp, certified) | sigma (RDP) | noise saved | steps | test accuracy | certified eps | "
        "calibration (s) | training (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if r["setting"] is None:
            print(
                f"| non-private | - | - | - | {r['steps']} | {r['accuracy']:.3f} | inf | - | "
                f"{r['seconds_training']:.1f} |"
            )
            continue
        p = r["plan"]
        if p is None:
            print(
                f"| eps = {r['setting']:g} | {r['sigma']:.4f} (given) | - | - | {r['steps']}"
                f"{' (budget stop)' if r['stopped_by_budget'] else ''} | {r['accuracy']:.3f} | "
                f"{r['epsilon_certified']:.4f} | - | {r['seconds_training']:.1f} |"
            )
            continue
        saved = 1 - p.noise_multiplier / p.noise_multiplier_rdp
        print(
            f"| eps = {r['setting']:g} | {p.noise_multiplier:.4f} | {p.noise_multiplier_rdp:.4f} | {100 * saved:.1f} % "
            f"| {r['steps']}{' (budget stop)' if r['stopped_by_budget'] else ''} | {r['accuracy']:.3f} | "
            f"{r['epsilon_certified']:.4f} | {r['seconds_calibration']:.1f} | {r['seconds_training']:.1f} |"
        )
    if args.out:
        plot(results, args.out)
        print(f"\nfigure: {os.path.abspath(args.out)}")
    return results


if __name__ == "__main__":
    main()
