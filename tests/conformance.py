"""The conformance suite every accountant runs through.

Subclass :class:`AccountantConformance` in a ``test_*.py`` file, set ``method``
and (if the accountant is not general) ``make``/``grad_params``; pytest then
collects every check below for that accountant.  Later accountants (saddle
point, characteristic function, certified, Monte Carlo) add their subclass.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import accountant_programs, central_difference, x64
from hypothesis import given
from hypothesis import strategies as st

import jaxdp

#: each conformance class's batched epsilon (``AccountantConformance._vmap_eps``)
_VMAP_RESULTS: dict = {}


class AccountantConformance:
    method: str = ""
    certified: bool = True
    #: relative tolerance of gradients against float64 central differences
    grad_rtol: float = 1e-6
    #: relative tolerance of jit == eager (solver tolerance x the method's numerical noise)
    jit_rtol: float = 1e-12
    #: relative tolerance of a user's jit / vmap against the plain call (the same program, traced otherwise)
    transform_rtol: float = 1e-12
    #: relative tolerance of add_or_remove against the worse single direction (two code paths)
    directions_rtol: float = 1e-7
    #: relative tolerance of the delta(eps(delta)) round trip
    roundtrip_rtol: float = 1e-6
    #: the deltas of the round trip (an accountant that loses its digits at small delta stops above them)
    roundtrip_deltas: tuple = (1e-3, 1e-6, 1e-10)
    #: does the accountant support Poisson subsampling (q < 1)?
    subsampled: bool = True
    steps: int = 500
    delta: float = 1e-5
    #: checks too slow to compile for this accountant in the default run (``-m slow`` runs them)
    slow_checks: frozenset = frozenset()

    def make(self, sigma, q):
        if self.subsampled:
            return jaxdp.PoissonSubsampledGaussian(sigma, q)
        return jaxdp.Gaussian(sigma)

    def eps(self, sigma, q=0.01, steps=None, delta=None):
        return jaxdp.epsilon_for_delta(
            self.make(sigma, q),
            delta=self.delta if delta is None else delta,
            num_steps=self.steps if steps is None else steps,
            method=self.method,
        )

    def dlt(self, sigma, q=0.01, steps=None, epsilon=1.0):
        return jaxdp.delta_for_epsilon(
            self.make(sigma, q), epsilon=epsilon, num_steps=self.steps if steps is None else steps, method=self.method
        )

    # -- output type ----------------------------------------------------------
    def test_method_is_registered(self):
        info = jaxdp.method_info(self.method)
        assert info.certified == self.certified

    def test_returns_float64_scalars(self):
        e = self.eps(1.0)
        d = self.dlt(1.0)
        assert e.dtype == jnp.float64 and e.shape == ()
        assert d.dtype == jnp.float64 and d.shape == ()
        assert float(e) > 0 and 0 < float(d) < 1

    # -- transformations ----------------------------------------------------------
    def test_jit_equals_eager(self):
        jitted = float(self.eps(0.9))
        with jax.disable_jit():
            eager = float(self.eps(0.9))
        assert eager == pytest.approx(jitted, rel=self.jit_rtol)

    def test_user_jit_equals_call(self):
        with x64():
            f = jax.jit(lambda s: self.eps(s))
            assert float(f(1.2)) == pytest.approx(float(self.eps(1.2)), rel=self.transform_rtol)

    #: (sigma, q, steps, delta) of the two vmap checks: sigma and q varied, then steps and delta
    VMAP_POINTS = (
        [0.7, 1.0, 1.6, 3.0, 1.0, 1.0, 1.0, 1.0],
        [0.01, 0.02, 0.05, 0.1, 0.01, 0.01, 0.01, 0.01],
        [None] * 4 + [10, 100, 1000, 3000],
        [None] * 4 + [1e-3, 1e-5, 1e-8, 1e-6],
    )

    def _vmap_eps(self):
        """epsilon at :data:`VMAP_POINTS` in one ``jax.vmap`` call, made once per class: both vmap checks take their
        half (a plain vmap traces anew at each call, and the split estimate's nested loops take ~10 s to batch)."""
        key = type(self)
        if key not in _VMAP_RESULTS:
            sigmas, qs, steps, deltas = self.VMAP_POINTS
            steps = [float(self.steps if n is None else n) for n in steps]
            deltas = [self.delta if d is None else d for d in deltas]
            with x64():
                args = [jnp.asarray(v, jnp.float64) for v in (sigmas, qs, steps, deltas)]
                _VMAP_RESULTS[key] = np.asarray(jax.vmap(lambda s, q, n, d: self.eps(s, q, n, d))(*args))
        return _VMAP_RESULTS[key]

    def _looped_eps(self, points):
        sigmas, qs, steps, deltas = (self.VMAP_POINTS[i][points] for i in range(4))
        with x64():
            return [float(self.eps(s, q, n, d)) for s, q, n, d in zip(sigmas, qs, steps, deltas)]

    def test_vmap_equals_loop(self):
        np.testing.assert_allclose(self._vmap_eps()[:4], self._looped_eps(slice(0, 4)), rtol=self.transform_rtol)

    def test_vmap_over_steps_and_delta(self):
        np.testing.assert_allclose(self._vmap_eps()[4:], self._looped_eps(slice(4, 8)), rtol=self.transform_rtol)

    def test_no_recompilation_on_new_values(self):
        self.eps(1.0, 0.01, 100, 1e-5)
        self.dlt(1.0, 0.01, 100, 1.0)
        before = accountant_programs()
        for s, q, n, d in [(1.3, 0.02, 250, 1e-6), (2.2, 0.2, 7, 1e-3)]:
            self.eps(s, q, n, d)
            self.dlt(s, q, n, 2.0 * d * 1e3)
        assert accountant_programs() == before

    # -- gradients ----------------------------------------------------------------
    # every gradient check of epsilon takes d/d(sigma, q) at Python floats, and of delta likewise: one program
    # each (a tangent in sigma alone, or a jit around the grad, would be another compile of the same maths)
    def _grad_eps(self, sigma, q=0.01):
        return jax.grad(lambda s, qq: self.eps(s, qq), argnums=(0, 1))(float(sigma), float(q))

    def _grad_dlt(self, sigma, q=0.01, epsilon=2.0):
        return jax.grad(lambda s, qq: self.dlt(s, qq, epsilon=epsilon), argnums=(0, 1))(float(sigma), float(q))

    def test_grad_epsilon_wrt_sigma(self):
        with x64():
            g = float(self._grad_eps(1.1)[0])
            fd = central_difference(lambda s: self.eps(s), 1.1)
        assert g < 0
        assert g == pytest.approx(fd, rel=self.grad_rtol)

    def test_grad_delta_wrt_sigma(self):
        with x64():
            g = float(self._grad_dlt(1.1)[0])
            fd = central_difference(lambda s: self.dlt(s, epsilon=2.0), 1.1)
        assert g < 0
        assert g == pytest.approx(fd, rel=self.grad_rtol)

    def test_grad_epsilon_wrt_q(self):
        if not self.subsampled:
            pytest.skip("no sampling probability")
        with x64():
            g = float(self._grad_eps(1.1, 0.02)[1])
            fd = central_difference(lambda q: self.eps(1.1, q), 0.02)
        assert g > 0
        assert g == pytest.approx(fd, rel=self.grad_rtol)

    def test_gradients_finite_on_a_grid(self):
        with x64():
            for s in [0.6, 1.0, 4.0]:
                for q in [1e-3, 0.05, 0.5]:
                    gs, gq = self._grad_eps(s, q)
                    assert np.isfinite(float(gs)) and np.isfinite(float(gq))

    # -- semantics ----------------------------------------------------------------
    def test_delta_of_epsilon_round_trip(self):
        for delta in self.roundtrip_deltas:
            e = float(self.eps(1.0, delta=delta))
            back = float(self.dlt(1.0, epsilon=e))
            assert back == pytest.approx(delta, rel=self.roundtrip_rtol)

    def test_upper_bounds_the_exact_gaussian(self):
        if not self.certified:
            pytest.skip("estimate, not a bound")
        for delta in [1e-2, 1e-6, 1e-12]:
            exact = float(jaxdp.epsilon_for_delta(jaxdp.Gaussian(1.5), delta=delta, num_steps=40, method="exact"))
            got = float(jaxdp.epsilon_for_delta(jaxdp.Gaussian(1.5), delta=delta, num_steps=40, method=self.method))
            assert got >= exact * (1 - 1e-12)

    def test_add_or_remove_is_the_worse_direction(self):
        if not self.subsampled:
            pytest.skip("symmetric mechanism")
        vals = {}
        for adj in ["remove", "add", "add_or_remove"]:
            m = jaxdp.PoissonSubsampledGaussian(0.8, 0.05, adjacency=adj)
            vals[adj] = float(jaxdp.epsilon_for_delta(m, delta=1e-6, num_steps=200, method=self.method))
        # add-or-remove runs both directions through one traced copy (the direction a traced flag, the remove
        # quadrature on the add direction's node count), a single direction through the string path: two code
        # paths that agree to the quadrature's accuracy (measured 8e-9 for delta2-certified, <1e-13 else)
        assert vals["add_or_remove"] == pytest.approx(max(vals["remove"], vals["add"]), rel=self.directions_rtol)
        assert vals["remove"] != pytest.approx(vals["add"], rel=1e-2)  # the directions do differ here

    def test_heterogeneous_composition(self):
        parts = ((self.make(1.0, 0.01), 300), (self.make(2.0, 0.02), 200))
        comp = jaxdp.Composition.of(*parts)
        e_comp = float(jaxdp.epsilon_for_delta(comp, delta=1e-5, method=self.method))
        e_first = float(jaxdp.epsilon_for_delta(parts[0][0], delta=1e-5, num_steps=300, method=self.method))
        assert e_comp > e_first
        # num_steps repeats the whole composition
        e_twice = float(jaxdp.epsilon_for_delta(comp, delta=1e-5, num_steps=2, method=self.method))
        doubled = jaxdp.Composition.of((parts[0][0], 600), (parts[1][0], 400))
        assert e_twice == pytest.approx(
            float(jaxdp.epsilon_for_delta(doubled, delta=1e-5, method=self.method)), rel=1e-10
        )

    @given(
        sigma=st.floats(0.6, 4.0),
        q=st.floats(1e-3, 0.3),
        steps=st.integers(1, 3000),
        log10_delta=st.floats(-12, -3),
    )
    def test_monotone_in_sigma_q_and_steps(self, sigma, q, steps, log10_delta):
        delta = 10.0**log10_delta
        base = float(self.eps(sigma, q, steps, delta))
        assert float(self.eps(sigma * 1.2, q, steps, delta)) <= base * (1 + 1e-9)
        if self.subsampled:
            assert float(self.eps(sigma, min(q * 1.5, 1.0), steps, delta)) >= base * (1 - 1e-9)
        assert float(self.eps(sigma, q, steps + 50, delta)) >= base * (1 - 1e-9)
        assert float(self.eps(sigma, q, steps, delta * 0.1)) >= base * (1 - 1e-9)

    # -- invalid input ----------------------------------------------------------------
    def test_traced_invalid_input_gives_nan(self):
        with x64():
            f = jax.jit(lambda s, d: self.eps(s, 0.01, 100, d))
            assert math.isnan(float(f(-1.0, 1e-5)))
            assert math.isnan(float(f(float("nan"), 1e-5)))
            assert math.isnan(float(f(1.0, float("nan"))))
            assert math.isnan(float(f(1.0, 1.5)))
            g = jax.jit(lambda e: self.dlt(1.0, 0.01, 100, e))
            assert math.isnan(float(g(-0.5)))
            assert math.isnan(float(g(float("inf"))))
            if self.subsampled:
                h = jax.jit(lambda q: self.eps(1.0, q, 100))
                assert math.isnan(float(h(1.5)))
                assert math.isnan(float(h(0.0)))

    @pytest.mark.parametrize(
        "kwargs,match",
        [
            ({"delta": 0.0}, r"delta must be in \(0, 1\)"),
            ({"delta": 1.0}, r"delta must be in \(0, 1\)"),
            ({"delta": float("nan")}, "delta must be finite"),
            ({"delta": 1e-5, "num_steps": 0}, "num_steps must be an integer >= 1"),
            ({"delta": 1e-5, "num_steps": 10.5}, "num_steps must be an integer >= 1"),
            ({"delta": 1e-5, "num_steps": float("inf")}, "num_steps must be finite"),
        ],
    )
    def test_epsilon_validation(self, kwargs, match):
        kwargs.setdefault("num_steps", 10)
        with pytest.raises(ValueError, match=match):
            jaxdp.epsilon_for_delta(self.make(1.0, 0.01), method=self.method, **kwargs)

    @pytest.mark.parametrize(
        "epsilon,match", [(-1.0, "epsilon must be >= 0"), (float("inf"), "epsilon must be finite")]
    )
    def test_delta_validation(self, epsilon, match):
        with pytest.raises(ValueError, match=match):
            jaxdp.delta_for_epsilon(self.make(1.0, 0.01), epsilon=epsilon, num_steps=10, method=self.method)
