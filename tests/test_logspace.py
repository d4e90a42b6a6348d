"""The log-space special functions against mpmath (50 digits): ``log_ndtr`` and its derivative, ``log1p`` (XLA:CPU's
is 240 ulp off on ``-0.414 < x < -0.355`` in jaxlib 0.10) and ``log1mexp``, which the certified lattice charges a
few ulp (``u Z^2`` for ``log Phi``)."""

from __future__ import annotations

import jax
import mpmath
import numpy as np

from jaxdp.numerics import float64_scope, log1mexp, log1p, log_ndtr

U = 2.0**-53
mpmath.mp.dps = 50


def _f64(fn, *args):
    return np.asarray(float64_scope(jax.jit(fn))(*args))


def _log_ndtr_mp(v):
    v = mpmath.mpf(float(v))
    return mpmath.log1p(-mpmath.ncdf(-v)) if v > 0 else mpmath.log(mpmath.ncdf(v))  # (Phi(v) ~ 1 - 1e-53 at v = 15)


def test_log_ndtr_to_a_few_ulp_everywhere():
    # across both switches (the erfc's sides at 0, the series at -35) and far into either tail
    x = np.concatenate([-np.logspace(-8, 5, 400), np.linspace(-40.0, 40.0, 1601), np.logspace(-8, 1.6, 200)])
    x = np.concatenate([x, [0.0, -35.0, np.nextafter(-35.0, 0.0), np.nextafter(-35.0, -1.0), -0.5, 0.5]])
    ref = np.array([float(_log_ndtr_mp(v)) for v in x])
    got = _f64(log_ndtr, x)
    assert np.all(np.abs(got - ref) <= 8 * U * (1.0 + np.abs(ref)))
    # where log Phi is near 0 (x > 0), relative to its own size (log1p of the small tail)
    pos = (x > 0) & (ref < -1e-290)  # (beyond, 1 - Phi underflows to subnormals: 0 to 1e-300 absolute)
    assert np.all(np.abs(got[pos] - ref[pos]) <= 8 * U * (1.0 + x[pos] ** 2) * np.abs(ref[pos]))  # (erfc: x^2 ulp)


def test_log_ndtr_derivatives():
    x = np.array([-1e4, -300.0, -36.0, -35.0001, -34.9999, -20.0, -5.0, -1.0, 0.0, 1.0, 5.0, 20.0])
    d1 = _f64(jax.vmap(jax.grad(log_ndtr)), x)
    d2 = _f64(jax.vmap(jax.grad(jax.grad(log_ndtr))), x)
    ref1 = np.array([float(mpmath.npdf(v) / mpmath.ncdf(v)) for v in x])
    ref2 = np.array([float(mpmath.diff(lambda z: mpmath.npdf(z) / mpmath.ncdf(z), v)) for v in x])
    np.testing.assert_allclose(d1, ref1, rtol=1e-12)
    # (above the series' switch the second derivative cancels: -x - phi/Phi, ~x^2 ulp)
    np.testing.assert_allclose(d2, ref2, rtol=1e-9)


def test_log1p_where_xla_is_off():
    x = np.concatenate([np.linspace(-0.999, 3.0, 4001), np.linspace(-0.42, -0.35, 2001)])
    ref = np.array([float(mpmath.log1p(mpmath.mpf(float(v)))) for v in x])
    got = _f64(log1p, x)
    ok = ref != 0
    assert np.all(np.abs(got[ok] - ref[ok]) <= 4 * U * np.abs(ref[ok]))


def test_log1mexp():
    x = -np.concatenate([np.logspace(-12, 1.5, 2001), np.linspace(0.85, 1.1, 501)])  # (1.04 > -x > 0.88: log1p's gap)
    ref = np.array([float(mpmath.log(-mpmath.expm1(mpmath.mpf(float(v))))) for v in x])
    got = _f64(log1mexp, x)
    assert np.all(np.abs(got - ref) <= 6 * U * np.abs(ref))
