"""The mixture quadrature against independent mpmath integrals (1e-10 relative)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from _helpers import central_difference, complex_log_close, x64
from _mp_refs import mixture_cgf

import jaxdp
from jaxdp.mechanisms._quadrature import log_mixture_moment

TOL = 1e-10


def _psg_cgf(t, sigma, q, direction):
    with x64():
        m = jaxdp.PoissonSubsampledGaussian(sigma, q)
        return jax.jit(lambda t: m.cgf(t, direction))(t)


@pytest.mark.parametrize(
    "sigma,q,t,direction",
    [
        (0.5, 1e-3, 0.5, "remove"),
        (0.5, 1e-3, 20.0, "remove"),
        (0.5, 0.01, 7.3, "add"),
        (1.0, 0.01, 1.0, "remove"),
        (1.0, 0.01, 31.0, "add"),
        (1.0, 0.3, -0.5, "remove"),
        (2.0, 0.01, 100.0, "remove"),
        (2.0, 0.1, 50.0, "add"),
        (10.0, 1e-4, 3.0, "remove"),
        (10.0, 0.5, 300.0, "add"),
        (0.3, 0.5, 12.0, "remove"),
        (1.1, 0.0042667, 4.0, "remove"),
    ],
)
def test_psg_cgf_matches_mpmath(sigma, q, t, direction):
    got = float(_psg_cgf(t, sigma, q, direction))
    ref = float(mixture_cgf(t, sigma, [0, 1], [1 - mp.mpf(q), mp.mpf(q)], direction))
    assert abs(got - ref) <= TOL * abs(ref)


@pytest.mark.parametrize("k,q,sigma,t", [(2, 0.01, 1.0, 5.0), (4, 0.01, 2.0, 10.0), (8, 0.05, 2.0, 3.0)])
@pytest.mark.parametrize("direction", ["remove", "add"])
def test_group_mixture_cgf_matches_mpmath(k, q, sigma, t, direction):
    with x64():
        m = jaxdp.MixtureOfGaussians.poisson_group(sigma, q, k)
        got = float(m.cgf(t, direction))
    ref = float(mixture_cgf(t, sigma, list(range(k + 1)), list(np.asarray(m.probs)), direction))
    assert abs(got - ref) <= TOL * abs(ref)


def test_general_mixture_without_zero_sensitivity():
    c, p = [0.5, 1.0, 2.5], [0.2, 0.5, 0.3]
    with x64():
        m = jaxdp.MixtureOfGaussians(1.5, c, p)
        for direction, t in [("remove", 2.0), ("add", 2.0), ("remove", 15.0), ("add", 15.0)]:
            got = float(m.cgf(t, direction))
            ref = float(mixture_cgf(t, 1.5, c, p, direction))
            assert abs(got - ref) <= TOL * abs(ref), (direction, t, got, ref)


@pytest.mark.parametrize("t", [1.0 + 0.7j, 3.0 + 2.0j, 0.5 - 1.5j])
def test_complex_cgf_matches_mpmath(t):
    with x64():
        m = jaxdp.PoissonSubsampledGaussian(1.0, 0.05)
        got = complex(m.cgf(jnp.asarray(t, jnp.complex128), "remove"))
    ref = complex(mixture_cgf(t, 1.0, [0, 1], [0.95, 0.05], "remove"))
    assert complex_log_close(got, ref, TOL)


def test_gaussian_special_case_is_exact():
    # One component: the moment is lam (lam - 1) b^2 / 2 in closed form.
    with x64():
        for lam, b in [(2.5, 1.0), (40.0, 0.5), (-30.0, 2.0), (0.3, 3.0)]:
            got = float(log_mixture_moment(lam, jnp.zeros(1), jnp.array([b])))
            ref = lam * (lam - 1) * b * b / 2
            assert abs(got - ref) <= 1e-12 * abs(ref)


def test_cgf_gradients_match_finite_differences():
    with x64():

        def k_sigma(s):
            return jaxdp.PoissonSubsampledGaussian(s, 0.01).cgf(8.0)

        def k_q(q):
            return jaxdp.PoissonSubsampledGaussian(0.8, q).cgf(8.0, "add")

        def k_t(t):
            return jaxdp.PoissonSubsampledGaussian(0.8, 0.02).cgf(t)

        for f, x in [(k_sigma, 0.9), (k_q, 0.02), (k_t, 3.0)]:
            g = float(jax.grad(f)(x))
            fd = central_difference(f, x)
            assert abs(g - fd) <= 1e-6 * abs(fd), (f.__name__, g, fd)


def test_second_derivative_is_finite_and_positive():
    with x64():
        m = jaxdp.PoissonSubsampledGaussian(1.0, 0.01)
        k2 = jax.grad(jax.grad(lambda t: m.cgf(t)))(5.0)
    assert np.isfinite(float(k2)) and float(k2) > 0


@pytest.mark.parametrize("t", [150.0, 212.9, 300.0, 1000.0])
def test_far_component_is_not_lost_near_the_branch_switch(t):
    """Regression: the near-one branch was once chosen when clipped terms hid a
    dominant far-away mixture component (K came out 0.08 instead of 42.4)."""
    sigma, q = 4.607074803735996, 0.008045332835106144
    with x64():
        got = float(jaxdp.PoissonSubsampledGaussian(sigma, q).cgf(t))
    ref = float(mixture_cgf(t, sigma, [0, 1], [1 - mp.mpf(q), mp.mpf(q)]))
    assert abs(got - ref) <= TOL * abs(ref)


def test_cgf_derivatives_are_smooth_and_convex_along_t():
    """K' increases and K'' stays positive through the regime change of the tilted law."""
    with x64():
        m = jaxdp.PoissonSubsampledGaussian(4.607074803735996, 0.008045332835106144)
        ts = jnp.linspace(100.0, 400.0, 301)
        k1 = jax.vmap(jax.grad(lambda t: m.cgf(t)))(ts)
        k2 = jax.vmap(jax.grad(jax.grad(lambda t: m.cgf(t))))(ts)
    assert np.all(np.diff(np.asarray(k1)) > 0)
    assert np.all(np.asarray(k2) > 0)


def test_bracketed_secant_solves_and_differentiates_like_newton():
    """The secant path of ``solve_decreasing`` (``slope0=``): the same root as bracketed Newton, from a
    poor slope estimate and from outside a steep region, and the implicit gradient of the root."""
    import jax
    import jax.numpy as jnp

    from jaxdp.numerics import bracketed_newton, bracketed_secant, solve_decreasing

    with jax.enable_x64(True):

        def f(x, a):  # decreasing, steep past the root (as log delta along the saddle-point curve)
            return a - x - jnp.expm1(3.0 * (x - 1.0))

        for a in (0.3, 2.0, 7.5):
            ref, *_ = bracketed_newton(lambda x, a=a: f(x, a), -10.0, 10.0, 0.0)
            for x0, s0 in ((0.0, -1.0), (5.0, -0.01), (-8.0, -100.0)):
                x, _, _, it = bracketed_secant(lambda x, a=a: f(x, a), -10.0, 10.0, x0, s0)
                assert abs(float(x - ref)) < 1e-9 and int(it) < 40
        root = lambda a: solve_decreasing(lambda x: f(x, a), -10.0, 10.0, x0=0.0, slope0=-1.0)  # noqa: E731
        g = jax.grad(root)(2.0)
        h = 1e-6
        fd = (root(2.0 + h) - root(2.0 - h)) / (2 * h)
        assert abs(float(g - fd)) < 1e-6 * abs(float(fd))


def test_bracketed_log_newton_finds_the_closed_form_root_where_f_vanishes_past_it():
    """``log f(x) = log_target`` for ``f(x) = (1 - x)^3_+`` on ``[0, 2]`` (zero on the upper part of the bracket, as a
    Monte Carlo delta past the largest sampled loss): the root ``1 - target^(1/3)``, from either side."""
    from jaxdp.numerics import bracketed_log_newton

    with jax.enable_x64(True):

        def value_and_slope(x):
            r = jnp.maximum(1.0 - x, 0.0)
            return r**3, -3.0 * r**2

        for target in (0.5, 1e-6, 1e-30):
            for x0 in (0.0, 0.9, 1.7):
                x = bracketed_log_newton(
                    value_and_slope,
                    jnp.log(target),
                    jnp.zeros(()),
                    jnp.asarray(2.0),
                    jnp.asarray(x0),
                    max_iterations=60,
                )
                assert float(x) == pytest.approx(1.0 - target ** (1.0 / 3.0), rel=1e-10, abs=1e-12)


def test_implicit_root_inside_a_scan_that_closes_over_integers():
    """The root's derivative when ``f`` closes over a scan body's integer and float tracers, under grad, jit(grad),
    jvp and vmap: the rule is traced again for the scan's JVP, so it must hold no tracer of its own (with every
    closed-over value an argument it did not: "No constant handler for type: DynamicJaxprTracer", JAX 0.12).
    Against the closed form: the root of ``a * k - x`` summed over k = 1..3 is ``6 a``."""
    import jax
    import jax.numpy as jnp

    from jaxdp.numerics import solve_decreasing

    with jax.enable_x64(True):

        def total(a):
            def body(acc, k):
                scale = a * k.astype(jnp.float64)
                root = solve_decreasing(lambda x: jnp.where(k > 0, scale - x, -x), -100.0, 100.0)
                return acc + root, None

            return jax.lax.scan(body, jnp.float64(0.0), jnp.arange(1, 4))[0]

        assert float(total(1.5)) == pytest.approx(9.0, rel=1e-12)
        assert float(jax.grad(total)(1.5)) == pytest.approx(6.0, rel=1e-12)
        assert float(jax.jit(jax.grad(total))(1.5)) == pytest.approx(6.0, rel=1e-12)
        assert float(jax.jvp(total, (1.5,), (1.0,))[1]) == pytest.approx(6.0, rel=1e-12)
        np.testing.assert_allclose(np.asarray(jax.vmap(jax.grad(total))(jnp.array([1.0, 2.0]))), [6.0, 6.0])


def test_implicit_root_gradient_ignores_an_infinite_partial_of_a_constant():
    """Regression (review of the one-linearisation rule): ``f`` closes over a constant whose partial is infinite at
    the root (``sqrt`` at 0).  The slope must come from ``x`` alone: a linear map applied to a zero tangent for
    the constant made it ``0 x inf = NaN`` and the derivative silently 0.  The root of ``a - x`` is ``a``."""
    from jaxdp.numerics import solve_decreasing

    with jax.enable_x64(True):
        zero = jnp.float64(0.0)

        def root(a):
            return solve_decreasing(lambda x: a - x + jnp.sqrt(zero), -10.0, 10.0)

        assert float(jax.grad(root)(1.0)) == pytest.approx(1.0, rel=1e-12)


def test_implicit_root_partials_forward_and_linearised_agree():
    """The implicit derivative's partials come from a batched forward-mode Jacobian for a few parameter elements
    and from one linearisation for more (``_implicit.FORWARD_PARTIALS_MAX``): both against the closed form.  The
    root of ``sum(a) - x - x^3`` for a vector ``a``: ``dx/da_i = 1 / (1 + 3 x^2)``, under grad, jit(grad), jvp and
    vmap, on either side of the threshold."""
    from jaxdp.numerics import _implicit, solve_decreasing

    with jax.enable_x64(True):

        def root(a):
            return solve_decreasing(lambda x: jnp.sum(a) - x - x**3, -10.0, 10.0)

        for n in (1, _implicit.FORWARD_PARTIALS_MAX, _implicit.FORWARD_PARTIALS_MAX + 1, 40):
            a = jnp.linspace(0.1, 2.0, n) / n
            x = float(root(a))
            assert x + x**3 == pytest.approx(float(jnp.sum(a)), rel=1e-12)
            want = np.full(n, 1.0 / (1.0 + 3.0 * x * x))
            np.testing.assert_allclose(np.asarray(jax.grad(root)(a)), want, rtol=1e-12)
            np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(root))(a)), want, rtol=1e-12)
            d = jnp.linspace(-1.0, 1.0, n)
            along = float(jax.jvp(root, (a,), (d,))[1])
            assert along == pytest.approx(float(want @ np.asarray(d)), rel=1e-10, abs=1e-14)
            batch = jnp.stack([a, 2.0 * a])
            xs = np.asarray(jax.vmap(root)(batch))
            want_batch = (1.0 / (1.0 + 3.0 * xs * xs))[:, None] * np.ones(n)
            np.testing.assert_allclose(np.asarray(jax.vmap(jax.grad(root))(batch)), want_batch, rtol=1e-12)


def test_a_root_and_a_value_found_elsewhere_carry_the_implicit_derivatives():
    """``root_found_elsewhere`` / ``value_found_elsewhere`` (a root and a value computed in a shared iteration):
    the root of ``a^2 - x`` is ``a^2`` (d/da = 2a), ``x^3 a`` there is ``a^7`` (d/da = 7 a^6), forward and reverse,
    and a root at the bracket's edge is a constant."""
    from jaxdp.numerics import root_found_elsewhere, value_found_elsewhere

    with jax.enable_x64(True):

        def chain(a, x_found):
            x = root_found_elsewhere(lambda x: a * a - x, x_found, -10.0, 10.0)
            return value_found_elsewhere(lambda v: v**3 * a, x_found**3 * a, x)

        a = 1.3
        found = lambda a: jax.lax.stop_gradient(a * a)  # noqa: E731  (what the shared iteration returned)
        assert float(chain(a, found(a))) == pytest.approx(a**7, rel=1e-14)
        assert float(jax.grad(lambda a: chain(a, found(a)))(a)) == pytest.approx(7 * a**6, rel=1e-12)
        assert float(jax.jvp(lambda a: chain(a, found(a)), (a,), (1.0,))[1]) == pytest.approx(7 * a**6, rel=1e-12)
        edge = jax.grad(lambda a: root_found_elsewhere(lambda x: a - x, jnp.float64(10.0), -10.0, 10.0))(12.0)
        assert float(edge) == 0.0


def test_minimize_on_grid_gradient_is_finite_where_f_is_infinite_off_the_minimum():
    """Regression (review): ``f`` infinite at one grid point (``1/x`` at 0) far from its minimum.  The derivative
    is ``f``'s partial at the minimiser alone (envelope theorem); through the grid's values, reverse mode summed
    every point's partials, 0 x inf = NaN.  Closed form: ``p ((x - 1.3)^2 + 1/x)`` has its minimum ``p m`` with
    ``m = min_x (x - 1.3)^2 + 1/x``, so the derivative in ``p`` is ``m``."""
    from scipy import optimize

    from jaxdp.numerics import minimize_on_grid

    with jax.enable_x64(True):

        def value(p):
            return minimize_on_grid(lambda x: p * ((x - 1.3) ** 2 + 1.0 / x), jnp.linspace(0.0, 3.0, 7))[0]

        m = optimize.minimize_scalar(lambda x: (x - 1.3) ** 2 + 1.0 / x, bounds=(0.5, 3.0), method="bounded").fun
        assert float(value(2.0)) == pytest.approx(2.0 * m, rel=1e-9)
        assert float(jax.grad(value)(2.0)) == pytest.approx(m, rel=1e-9)
        assert float(jax.jvp(value, (2.0,), (1.0,))[1]) == pytest.approx(m, rel=1e-9)
