"""Type-1 non-uniform FFT: ``f_k = sum_j c_j exp(i k x_j)`` for ``k = 0 .. M-1``.

Gaussian gridding (Dutt & Rokhlin 1993; Greengard & Lee, SIAM Review 2004):
each point is spread onto an oversampled periodic grid of ``R M`` points with
the periodised Gaussian ``exp(-x^2 / (4 tau))``, one FFT is taken and the
Gaussian's Fourier coefficients are divided out.  With oversampling ``R = 2``
and ``2 * SPREAD + 1 = 29`` taps the result is accurate to ~3e-14 times
``sum_j |c_j|`` (measured against the direct sum in ``tests/test_nufft.py``).

Cost ``O(N SPREAD + M log M)`` instead of the ``O(N M)`` of the direct sum,
which is what makes the characteristic-function accountant's "double
quadrature" cheap: ``N`` quadrature nodes of a per-step privacy loss, ``M``
nodes on the inversion contour.

Everything is differentiable in ``c`` and ``x`` (the grid index of a point is
piecewise constant; the kernel values carry the derivative).
"""

from __future__ import annotations

import math

import jax.numpy as jnp

__all__ = ["SPREAD", "nufft1"]

SPREAD = 14
OVERSAMPLING = 2


def nufft1(x, c, num: int):
    """``f_k = sum_j c_j exp(i k x_j)`` for ``k = 0, ..., num - 1``.

    Args:
      x: real positions, shape ``(N,)`` (any range; only ``x mod 2 pi`` matters).
      c: real or complex strengths, shape ``(N,)``.
      num: static number of output frequencies (even).

    Returns:
      Complex array of shape ``(num,)``.
    """
    if num % 2:
        raise ValueError(f"num must be even, got {num}.")
    m_r = OVERSAMPLING * num
    half = num // 2
    tau = math.pi * SPREAD / (num * num * OVERSAMPLING * (OVERSAMPLING - 0.5))
    two_pi = 2.0 * math.pi
    x = jnp.mod(x, two_pi)
    # shift the output band to k' = k - num/2 in [-num/2, num/2): smallest deconvolution factors
    c = c * jnp.exp(1j * half * x)
    h = two_pi / m_r
    m0 = jnp.round(x / h)
    d = jnp.arange(-SPREAD, SPREAD + 1, dtype=x.dtype)
    m = m0[:, None] + d[None, :]
    kern = jnp.exp(-((m * h - x[:, None]) ** 2) / (4.0 * tau))
    idx = jnp.mod(m, m_r).astype(jnp.int32)
    grid = jnp.zeros(m_r, dtype=c.dtype).at[idx.reshape(-1)].add((c[:, None] * kern).reshape(-1))
    spectrum = jnp.fft.ifft(grid)  # (1/m_r) sum_m grid_m exp(+2 pi i k m / m_r)
    k = jnp.arange(-half, half)
    scale = math.sqrt(math.pi / tau) * jnp.exp(k.astype(x.dtype) ** 2 * tau)
    return spectrum[jnp.mod(k, m_r)] * scale
