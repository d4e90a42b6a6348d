"""Choose (sigma, q, steps) for a privacy budget by minimising a utility proxy with optax.

    python examples/calibrate_tradeoff.py

For every (q, steps) the noise multiplier is calibrated to eps <= 4 at delta = 1e-5; its implicit
gradients make the objective differentiable in (q, steps).  The proxy: the variance of the noise in the
averaged gradient, (sigma / (q N))^2, averaged over the steps, plus a price on compute (examples seen).
The final configuration is checked with the certified accountant.
"""

import jaxdp

N = 50_000  # dataset size


def objective(sigma, q, steps):
    return (sigma / (q * N)) ** 2 / steps + 1e-9 * q * steps


if __name__ == "__main__":
    r = jaxdp.calibrate(objective, target_epsilon=4.0, delta=1e-5, sampling_prob=0.01, num_steps=1000, iterations=60)
    c = r.calibration
    print(f"objective: {r.history[0]:.4g} -> {r.objective:.4g} over {len(r.history)} optax steps")
    print(f"q = {float(c.sampling_prob):.5f} (batch ~{float(c.sampling_prob) * N:.0f}), steps = {int(c.num_steps)}")
    print(
        f"sigma = {float(c.noise_multiplier):.5f}: estimate eps = {float(c.epsilon_estimate):.5f}, "
        f"certified eps = {float(c.epsilon_certified):.5f} (<= 4)"
    )
