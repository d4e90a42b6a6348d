"""Quick start: epsilon, delta, a gradient and a vectorised sweep.

    python examples/quickstart.py
"""

import jax
import jax.numpy as jnp

import jaxdp


def main():
    m = jaxdp.PoissonSubsampledGaussian(noise_multiplier=1.0, sampling_prob=0.01)
    eps = jaxdp.epsilon_for_delta(m, num_steps=2000, delta=1e-5, method="rdp")
    print(f"RDP epsilon after 2000 steps at delta=1e-5: {float(eps):.4f}")

    d_eps = jax.grad(
        lambda s: jaxdp.epsilon_for_delta(
            jaxdp.PoissonSubsampledGaussian(s, 0.01), num_steps=2000, delta=1e-5, method="rdp"
        )
    )(1.0)
    print(f"d epsilon / d sigma at sigma=1: {float(d_eps):.4f}")

    with jax.enable_x64(True):
        sigmas = jnp.linspace(0.7, 2.0, 8)
        curve = jax.vmap(
            lambda s: jaxdp.epsilon_for_delta(
                jaxdp.PoissonSubsampledGaussian(s, 0.01), num_steps=2000, delta=1e-5, method="rdp"
            )
        )(sigmas)
    for s, e in zip(sigmas, curve):
        print(f"  sigma={float(s):.3f}  epsilon={float(e):.4f}")

    exact = jaxdp.epsilon_for_delta(jaxdp.Gaussian(70.0), num_steps=1200, delta=1e-5, method="exact")
    print(f"Gaussian sigma=70, 1200 steps, exact epsilon: {float(exact):.6f}")


if __name__ == "__main__":
    main()
