"""Non-uniform FFT against the direct sum."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import x64

from jaxdp.numerics._nufft import nufft1


@pytest.mark.parametrize("num", [16, 512, 4096])
def test_matches_the_direct_sum(num):
    rng = np.random.default_rng(num)
    x = rng.uniform(-60.0, 60.0, 2000)
    c = rng.uniform(0.0, 1.0, 2000) * np.exp(1j * rng.uniform(0, 6.3, 2000))
    with x64():
        got = np.asarray(nufft1(jnp.asarray(x), jnp.asarray(c), num))
    # extended precision: in float64 the phases k x_j alone carry ~1e-11 rounding errors
    phase = np.outer(np.arange(num, dtype=np.longdouble), x.astype(np.longdouble))
    cr, ci = c.real.astype(np.longdouble), c.imag.astype(np.longdouble)
    direct_re = np.cos(phase) @ cr - np.sin(phase) @ ci
    direct_im = np.sin(phase) @ cr + np.cos(phase) @ ci
    err = np.hypot(got.real - direct_re.astype(float), got.imag - direct_im.astype(float))
    assert np.max(err) <= 1e-12 * np.sum(np.abs(c))  # ~3e-14 typical; the deconvolution amplifies FFT rounding


def test_gradient_in_positions_matches_the_direct_sum():
    rng = np.random.default_rng(0)
    x_np, c_np = rng.uniform(-3.0, 3.0, 50), rng.uniform(0.0, 1.0, 50)

    def via_nufft(x):
        return jnp.sum(jnp.real(nufft1(x, c, 64)) * jnp.cos(0.1 * k))

    def direct(x):
        return jnp.sum(jnp.real(jnp.exp(1j * k[:, None] * x[None, :]) @ c) * jnp.cos(0.1 * k))

    with x64():
        x, c, k = jnp.asarray(x_np), jnp.asarray(c_np), jnp.arange(64)
        np.testing.assert_allclose(np.asarray(jax.grad(via_nufft)(x)), np.asarray(jax.grad(direct)(x)), atol=1e-9)


def test_odd_size_is_rejected():
    with pytest.raises(ValueError, match="even"):
        nufft1(jnp.zeros(3), jnp.ones(3), 7)
