"""Fixed batches and group privacy (Ganesh 2024) on the CIFAR-10 setting of the paper.

    python examples/group_privacy.py [--plot group_privacy.png] [--max-group 8]

Most training code draws batches of a fixed size (shuffling, ``DataLoader(batch_size=B)``), yet
Poisson-only accountants report the epsilon of Poisson sampling at ``q = B / n``.  The fixed batch's own
dominating pair (sensitivity 2 x Hypergeometric) gives the right number, and it is several times larger.
The same mixtures give group-level guarantees that grow near-linearly in the group size, where the
black-box conversion from the example-level guarantee blows up.
"""

import argparse

import jaxdp

N, B, STEPS, DELTA = 50_000, 500, 2000, 1e-6  # CIFAR-10, 20 epochs of 100 steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plot", default=None, help="write the group curves (PNG, needs matplotlib)")
    ap.add_argument("--max-group", type=int, default=8)
    ap.add_argument("--sigma", type=float, default=2.0)
    args = ap.parse_args()

    fixed = jaxdp.MixtureOfGaussians.fixed_batch_group(args.sigma, dataset_size=N, batch_size=B)
    poisson = jaxdp.PoissonSubsampledGaussian(args.sigma, B / N)
    eps_fixed = float(jaxdp.epsilon_for_delta(fixed, delta=DELTA, num_steps=STEPS, method="characteristic"))
    eps_poisson = float(jaxdp.epsilon_for_delta(poisson, delta=DELTA, num_steps=STEPS, method="characteristic"))
    print(f"sigma = {args.sigma:g}, {STEPS} steps, delta = {DELTA:g}")
    print(f"  fixed batches of {B} out of {N}:  epsilon = {eps_fixed:.3f}")
    print(
        f"  accounted as Poisson at q = {B / N:g}: epsilon = {eps_poisson:.3f}"
        f"  ({eps_fixed / eps_poisson:.1f}x too low)"
    )

    for sampling, kw in (("poisson", {"sampling_prob": B / N}), ("fixed", {"dataset_size": N, "batch_size": B})):
        curve = jaxdp.group_curve(
            noise_multiplier=args.sigma,
            num_steps=STEPS,
            delta=DELTA,
            max_group_size=args.max_group,
            sampling=sampling,
            method="characteristic",
            **kw,
        )
        print(f"\n{f'group privacy, {sampling} sampling:':<33}  g   epsilon   black-box")
        for g, e, bb in zip(curve.group_sizes, curve.epsilon, curve.black_box_epsilon):
            print(f"{'':>33}{g:>3}  {e:>8.3f}  {bb:>10.3f}")

    if args.plot:
        from jaxdp.cli import main as cli

        cli(
            f"group-curve --sigma {args.sigma} --sampling fixed --dataset-size {N} --batch-size {B} --steps {STEPS} "
            f"--delta {DELTA} --group-size {args.max_group} --method characteristic --plot {args.plot}".split()
        )


if __name__ == "__main__":
    main()
