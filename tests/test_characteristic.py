"""Characteristic-function accountant against closed forms, the reference table and the peers."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference_values as ref
from _helpers import central_difference, mechanism_for_row, x64
from conformance import AccountantConformance

import jaxdp
from jaxdp.accountants import _characteristic
from jaxdp.mechanisms import as_composition
from jaxdp.numerics import to_f64


class TestCharacteristicConformance(AccountantConformance):
    method = "characteristic"
    certified = False
    grad_rtol = 1e-5
    # the contour moves with the first root; its quadrature error (~1e-11) shows up between compilations
    jit_rtol = 1e-9
    # each compiles a new characteristic program (23-63 s cold on 2 cores): run with -m slow
    slow_checks = frozenset(
        {
            "test_gradients_finite_on_a_grid",
            "test_jit_equals_eager",
            "test_grad_epsilon_wrt_sigma",
            "test_grad_epsilon_wrt_q",
            "test_vmap_over_steps_and_delta",
            "test_vmap_equals_loop",
            "test_monotone_in_sigma_q_and_steps",
            "test_heterogeneous_composition",
            "test_traced_invalid_input_gives_nan",
            # issue 42: 111 CPU-s (test_user_mode's test_heavy_accountants_under_a_users_jit keeps the user's jit
            # with x64 off) and 75 (the add direction's program)
            "test_user_jit_equals_call",
            "test_add_or_remove_is_the_worse_direction",
            # issue 42, fifth cut: a gradient stays on certified, the split estimate, rdp and exact
            "test_grad_delta_wrt_sigma",
        }
    )


DELTA_ROWS = [r for r in ref.ROWS if r["query"] == "delta"]
EPS_ROWS = [r for r in ref.ROWS if r["query"] == "epsilon"]


# -- closed forms ---------------------------------------------------------------------------


@pytest.mark.parametrize("sigma,steps", [(1.0, 1), (2.0, 50), (70.0, 1200), (0.5, 10)])
@pytest.mark.parametrize("eps", [0.05, 1.0, 4.0, 12.0])
def test_gaussian_delta_matches_the_closed_form(sigma, steps, eps):
    """Down to delta ~ 1e-128 (sigma = 70, 1200 steps, eps = 12): the contour keeps the relative accuracy."""
    m = jaxdp.Gaussian(sigma)
    exact = float(jaxdp.log_delta_for_epsilon(m, epsilon=eps, num_steps=steps, method="exact"))
    got = float(jaxdp.log_delta_for_epsilon(m, epsilon=eps, num_steps=steps, method="characteristic"))
    assert got == pytest.approx(exact, abs=1e-7)  # i.e. delta to 1e-7 relative


@pytest.mark.parametrize("delta", [0.3, 1e-2, 1e-5, 1e-10, 1e-16, 1e-30])
def test_gaussian_epsilon_matches_the_closed_form(delta):
    m = jaxdp.Gaussian(3.0)
    exact = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=100, method="exact"))
    got = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=100, method="characteristic"))
    assert got == pytest.approx(exact, rel=1e-7, abs=1e-9)


@pytest.mark.parametrize("b", [0.5, 2.0])
def test_one_laplace_step_matches_the_closed_form(b):
    """One Laplace step: delta(eps) = 1 - exp((eps - 1/b) / 2) (atoms in the loss: slow tail)."""
    for eps in [0.1, 0.3 / b, 0.9 / b]:
        exact = 1 - math.exp((eps - 1 / b) / 2)
        got = float(jaxdp.delta_for_epsilon(jaxdp.Laplace(b), epsilon=eps, method="characteristic"))
        assert got == pytest.approx(exact, rel=1e-6)


def test_laplace_composition_is_bracketed_by_dp_accounting_pld():
    """Pessimistic / optimistic PLD (discretisation 1e-5) bracket the true delta.

    The Laplace loss has atoms, so the contour integrand decays only like s^-2 and the
    quadrature is good to ~1e-6 relative here (not 1e-10 as for Gaussian mixtures).
    """
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    b, n = 1.0, 3
    pess = pld_lib.from_laplace_mechanism(b, value_discretization_interval=1e-5).self_compose(n)
    opt = pld_lib.from_laplace_mechanism(
        b, value_discretization_interval=1e-5, pessimistic_estimate=False, use_connect_dots=False
    ).self_compose(n)
    for eps in [0.3, 0.9, 2.0]:
        got = float(jaxdp.delta_for_epsilon(jaxdp.Laplace(b), epsilon=eps, num_steps=n, method="characteristic"))
        assert opt.get_delta_for_epsilon(eps) * (1 - 1e-6) <= got <= pess.get_delta_for_epsilon(eps) * (1 + 1e-6)


# -- reference table ------------------------------------------------------------------------


@pytest.mark.parametrize("row", DELTA_ROWS, ids=lambda r: f"{r['case']}-eps{r['epsilon']}")
def test_reference_delta_rows(row):
    """Target 1e-3 relative; the reference itself is good to ~1e-5 (1e-4 below 1e-12)."""
    m = mechanism_for_row(row)
    got = float(jaxdp.delta_for_epsilon(m, epsilon=row["epsilon"], num_steps=row["steps"], method="characteristic"))
    assert got == pytest.approx(row["delta"], rel=1e-4)


def _slow_unless(keep):
    """Rows beyond a representative subset compile new shapes: run them with ``-m slow``."""
    return lambda row: row if keep(row) else pytest.param(row, marks=pytest.mark.slow)


_FAST_GROUP = {("group_cifar_sigma1", 2), ("group_cifar_sigma2", 8)}


def _fast_row(r):
    return r["mechanism"] != "poisson_gaussian_group" or (r["case"], r["group_size"]) in _FAST_GROUP


EPS_ROW_PARAMS = list(map(_slow_unless(_fast_row), EPS_ROWS))


@pytest.mark.parametrize("row", EPS_ROW_PARAMS, ids=lambda r: f"{r['case']}-{r.get('group_size', 1)}-{r['steps']}")
def test_reference_epsilon_rows(row):
    """Target 1e-4 relative, including the delta = 1e-13 rows (reference solved to 1e-5 / 1e-4 absolute)."""
    m = mechanism_for_row(row)
    got = float(jaxdp.epsilon_for_delta(m, delta=row["delta"], num_steps=row["steps"], method="characteristic"))
    assert got == pytest.approx(row["epsilon"], rel=1e-4)


@pytest.mark.parametrize(
    "row",
    [EPS_ROWS[8], pytest.param(EPS_ROWS[0], marks=pytest.mark.slow), pytest.param(EPS_ROWS[9], marks=pytest.mark.slow)],
    ids=lambda r: f"{r['case']}-{r['steps']}",
)
def test_gradients_match_finite_differences_on_reference_settings(row):
    def eps(s, q):
        m = jaxdp.PoissonSubsampledGaussian(s, q)
        return jaxdp.epsilon_for_delta(m, delta=row["delta"], num_steps=row["steps"], method="characteristic")

    with x64():
        gs, gq = jax.jit(jax.grad(eps, argnums=(0, 1)))(row["sigma"], row["q"])
        fd_s = central_difference(lambda s: eps(s, row["q"]), row["sigma"])
        fd_q = central_difference(lambda q: eps(row["sigma"], q), row["q"])
    assert float(gs) == pytest.approx(fd_s, rel=1e-5)
    assert float(gq) == pytest.approx(fd_q, rel=1e-5)


# -- agreement with the other accountants ------------------------------------------------------


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.02, 1000), (0.8, 0.005, 5000), (2.0, 0.05, 300)])
def test_agrees_with_the_saddle_point_accountant(sigma, q, steps):
    """Where q * steps >= 5 the saddle-point estimate is good to ~1%; its certified value is above."""
    m = jaxdp.PoissonSubsampledGaussian(sigma, q)
    for delta in [1e-5, 1e-10]:
        cf = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=steps, method="characteristic"))
        sp = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=steps, method="saddlepoint"))
        upper = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=steps, method="delta2-certified"))
        assert sp == pytest.approx(cf, rel=0.01)
        assert upper >= cf


@pytest.mark.parametrize("sigma,q,steps,delta", [(1.0, 0.02, 1000, 1e-6), (0.5, 0.001, 100, 1e-3)])
def test_agrees_with_dp_accounting_pld(sigma, q, steps, delta):
    """dp_accounting's pessimistic PLD (discretisation 1e-4) is above the truth by < ~1e-4."""
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    want = acc.get_epsilon(delta)
    got = float(
        jaxdp.epsilon_for_delta(
            jaxdp.PoissonSubsampledGaussian(sigma, q), delta=delta, num_steps=steps, method="characteristic"
        )
    )
    assert want - 2e-4 <= got <= want + 1e-6


# -- the quadrature's error terms -----------------------------------------------------------


def _terms(mech, steps, eps, direction="remove"):
    with x64():
        comp = to_f64(as_composition(mech, steps))
        return jax.jit(_characteristic.characteristic_terms, static_argnums=1)(comp, direction, eps)


def test_reported_error_terms_are_small_on_a_standard_setting():
    r = _terms(jaxdp.PoissonSubsampledGaussian(1.0, 0.01), 2000, 3.0)
    assert float(r.log_alias_bound - r.log_delta) < math.log(1e-13)
    assert float(r.log_truncation_estimate - r.log_delta) < math.log(1e-13)
    assert float(r.t) > 0 and float(r.ds) > 0 and float(r.s_max) == pytest.approx(float(r.ds) * 8192)


def _trapezoid_log_delta(comp, eps, t, ds):
    """The trapezoidal sum on the line Re z = t with spacing ds (Gaussian: closed-form CGF)."""
    s = ds * np.arange(200_000)
    z = t + 1j * s
    log_f = np.asarray(comp.cgf(z)) - z * eps - np.log(z) - np.log1p(z)
    w = np.ones_like(s)
    w[0] = 0.5
    return math.log(ds / math.pi * np.sum(w * np.real(np.exp(log_f))))


@pytest.mark.parametrize("ds", [0.6, 0.9, 1.2, 1.6])
def test_aliasing_bound_holds_for_coarse_node_spacings(ds):
    """Poisson summation: the trapezoidal sum minus delta is bounded by ``_log_alias_bound``."""
    with x64():
        comp = to_f64(as_composition(jaxdp.Gaussian(2.0), 20))
        eps = 3.0
        t = float(_characteristic._bounds.saddle_point(comp, "remove", eps))
        exact = float(jaxdp.log_delta_for_epsilon(jaxdp.Gaussian(2.0), epsilon=eps, num_steps=20, method="exact"))
        got = _trapezoid_log_delta(comp, eps, t, ds)
        a, k_ta = _characteristic._chernoff_cgfs(comp, "remove", jnp.float64(t))
        bound = float(_characteristic._log_alias_bound(t, eps, 2 * math.pi / ds, a, k_ta))
    err = abs(math.exp(got) - math.exp(exact))
    assert err <= math.exp(bound)
    if ds >= 1.2:  # coarse enough that aliasing is visible: the bound is not vacuous either
        assert err > 0 and math.exp(bound) < 1e3 * err + 1e-300


def test_edge_of_the_support_gives_a_negligible_delta():
    """Add direction of the subsampled Gaussian: L <= -steps log(1 - q), so delta = 0 beyond it."""
    m = jaxdp.PoissonSubsampledGaussian(0.5, 1e-3, adjacency="add")
    sup = -1000 * math.log1p(-1e-3)
    assert float(jaxdp.delta_for_epsilon(m, epsilon=sup + 0.5, num_steps=1000, method="characteristic")) == 0.0
    inside = float(jaxdp.delta_for_epsilon(m, epsilon=0.3, num_steps=1000, method="characteristic"))
    assert 0 < inside < 1


# -- real-axis inversion: a baseline that fails at small delta ----------------------------------


def test_real_axis_inversion_agrees_at_large_delta_and_breaks_at_small_delta():
    m = jaxdp.Gaussian(70.0)
    n = 1200

    def rel(eps):
        exact = float(jaxdp.delta_for_epsilon(m, epsilon=eps, num_steps=n, method="exact"))
        real = float(jaxdp.delta_for_epsilon(m, epsilon=eps, num_steps=n, method="gil-pelaez"))
        return abs(real - exact) / exact

    assert rel(1.0) < 1e-5  # delta ~ 6e-3
    assert rel(4.0) > 1.0  # delta ~ 1.3e-16: cancellation leaves no correct digit


@pytest.mark.slow
def test_real_axis_gradient_is_that_of_an_accurate_method():
    """The baseline's value carries quadrature noise (~1e-5 relative at delta ~ 1e-7: the tails' truncation moves
    with sigma), so finite differences of its own value are no reference for its derivative (a 1e-6 step gave
    -17.7).  Its autodiff is the derivative of the smooth rule at fixed spacing: equal, to its value's accuracy,
    to central differences of the contour method (smooth to ~1e-9)."""
    with x64():

        def log_delta(method):
            return jax.jit(
                lambda s: jaxdp.log_delta_for_epsilon(
                    jaxdp.PoissonSubsampledGaussian(s, 0.01), epsilon=2.0, num_steps=1000, method=method
                )
            )

        real = float(jax.grad(log_delta("gil-pelaez"))(1.1))  # -37.02 (measured)
        want = central_difference(log_delta("characteristic"), 1.1, 1e-4)  # -37.25
    assert real == pytest.approx(want, rel=2e-2)


def test_vmap_over_epsilon_matches_loop():
    with x64():
        m = jaxdp.PoissonSubsampledGaussian(1.0, 0.01)
        eps = jnp.array([0.5, 2.0, 5.0])
        batched = jax.vmap(lambda e: jaxdp.delta_for_epsilon(m, epsilon=e, num_steps=500, method="characteristic"))(eps)
        looped = [
            float(jaxdp.delta_for_epsilon(m, epsilon=float(e), num_steps=500, method="characteristic")) for e in eps
        ]
    np.testing.assert_allclose(np.asarray(batched), looped, rtol=1e-12)


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 1e-3, 1), (1.0, 1e-4, 30), (2.0, 1e-3, 5)])
def test_unresolvable_spike_is_flagged_and_answered_conservatively(sigma, q, steps):
    """Few steps with a tiny q: the contour cannot resolve the law; the answer must stay above the truth."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    m = jaxdp.PoissonSubsampledGaussian(sigma, q)
    delta = 1e-6
    truth = pld_lib.from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=1e-5)
    truth = truth.self_compose(steps).get_epsilon_for_delta(delta)
    got = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=steps, method="characteristic"))
    assert got >= truth * (1 - 1e-4)
    r = _terms(m, steps, truth, direction="remove")
    assert not bool(r.reliable)


def test_unreliable_regime_answers_with_the_certified_bound():
    """Where the contour cannot vouch for itself the entry points answer with ``certified-fast`` (a proven bound,
    tight: the calibrators' check, so a run compiles one certified program), in eager calls (its program compiled
    only then) and under jit (one program with a cond)."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    sigma, q, steps, delta = 1.0, 1e-3, 1, 1e-6
    m = jaxdp.PoissonSubsampledGaussian(sigma, q)
    truth = pld_lib.from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=1e-5)
    truth = truth.self_compose(steps).get_epsilon_for_delta(delta)
    got = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=steps, method="characteristic"))
    cert = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=steps, method="certified-fast"))
    assert got == cert
    assert truth * (1 - 1e-4) <= got <= truth * 1.01  # tight (delta2-certified was 2-3x)
    with x64():
        jitted = jax.jit(
            lambda s, q: jaxdp.epsilon_for_delta(
                jaxdp.PoissonSubsampledGaussian(s, q), delta=delta, num_steps=steps, method="characteristic"
            )
        )
        assert float(jitted(jnp.float64(sigma), jnp.float64(q))) == pytest.approx(got, rel=1e-12)
        # where the contour vouches for itself, the same program gives the estimate, as eager calls do: traced, the
        # search starts from the delta_2 estimate of the screen it shares with the fallback (one solve for both),
        # eager from epsilon_saddlepoint's (the same estimate: the two agree far below the method's ~1e-6)
        for s, qq in [(1.0, 0.5), (2.0, 0.2)]:
            m2 = jaxdp.PoissonSubsampledGaussian(s, qq)
            eager = float(jaxdp.epsilon_for_delta(m2, delta=delta, num_steps=steps, method="characteristic"))
            assert eager < float(jaxdp.epsilon_for_delta(m2, delta=delta, num_steps=steps, method="certified"))
            assert float(jitted(jnp.float64(s), jnp.float64(qq))) == pytest.approx(eager, rel=1e-10)
    # and where the contour is reliable, the method's own estimate
    est = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=2000, method="characteristic"))
    assert est < float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=2000, method="certified"))


def test_the_entry_points_program_traces_no_certified_start(monkeypatch):
    """The entry points' form (NaN where the contour cannot vouch for itself; the certified fallback answers
    there) starts its search from the delta_2 estimate: the certified saddle-point epsilon, about half of the
    program, is never traced into it (a trace alone, no compile)."""
    from jaxdp.accountants import _bounds, _characteristic

    def forbidden(*args, **kwargs):
        raise AssertionError("the certified saddle-point epsilon was traced")

    monkeypatch.setattr(_bounds, "epsilon_saddlepoint_upper", forbidden)
    monkeypatch.setattr(_bounds, "screen_stage", forbidden)
    with x64():
        comp = jaxdp.Composition.of((jaxdp.PoissonSubsampledGaussian(1.1, 0.01), 1000))
        out = jax.eval_shape(
            lambda c: _characteristic.epsilon_characteristic(c, "remove", jnp.log(1e-5), unreliable="nan"), comp
        )
        assert out.shape == ()
        with pytest.raises(AssertionError, match="certified saddle-point"):  # the internal form keeps its fallback
            jax.eval_shape(lambda c: _characteristic.epsilon_characteristic(c, "remove", jnp.log(1e-5)), comp)


def test_the_estimate_given_the_shared_screen_is_the_estimate_alone():
    """Under a user's trace the entry points compute the certified fallback's screen once per direction, before
    the ``lax.cond``, and start the contour search from its delta_2 estimate (``_programs._screen_and_worst`` with
    ``epsilon_or_nan_given_screen``); an eager call starts from ``epsilon_saddlepoint``'s, the same estimate.  That
    traced part alone (no fallback: a program of the concrete one's size) answers as the eager entry point does, far
    below the method's own error (~1e-6)."""
    from jaxdp.accountants import _programs
    from jaxdp.accountants._registry import method_info

    info = method_info("characteristic")
    screen = _programs._shared_screen(info)
    assert screen is method_info("certified").screen_stage  # (delta2-certified's stage: the fallback's screen)
    delta, steps = 1e-5, 1000

    def traced(s, q):
        comp = jaxdp.Composition.of((jaxdp.PoissonSubsampledGaussian(s, q), steps))
        value, stages = _programs._screen_and_worst(
            comp, jnp.log(delta), screen, info.epsilon_or_nan_given_screen, scanned=True
        )
        return value, stages.estimate

    with x64():
        program = jax.jit(traced)
        for s, q in [(1.1, 0.01), (0.8, 0.05)]:
            got, estimates = program(jnp.float64(s), jnp.float64(q))
            want = float(
                jaxdp.epsilon_for_delta(
                    jaxdp.PoissonSubsampledGaussian(s, q), delta=delta, num_steps=steps, method="characteristic"
                )
            )
            assert np.isfinite(np.asarray(estimates)).all()  # (both directions' estimates from the one screen)
            assert float(got) == pytest.approx(want, rel=1e-10)


def test_public_terms_lie_in_the_numpy_bracket_and_report_small_errors():
    """``jaxdp.characteristic_terms``: its ``log_delta`` (the larger direction's) lies in the independent numpy
    FFT bracket of ``tests/_fft_reference.py`` (both directions, max taken), with a proven aliasing bound and an
    estimated truncation far below delta; bad input is one clear error."""
    from _fft_reference import psg_log_delta_bracket

    sigma, q, steps, eps = 1.0, 0.01, 1000, 2.0
    r = jaxdp.characteristic_terms(jaxdp.PoissonSubsampledGaussian(sigma, q), epsilon=eps, num_steps=steps)
    # (the loss reach and spacing resolve this setting's bracket to 3 % of delta within the default FFT window)
    kw = {"lmax": 4.0, "dx": 4e-6}
    brackets = [psg_log_delta_bracket(sigma, q, steps, eps, direction=d, **kw) for d in ("remove", "add")]
    lo, hi = max(b[0] for b in brackets), max(b[1] for b in brackets)
    got = float(r.log_delta)
    assert lo - 1e-6 <= got <= hi + 1e-6, (lo, got, hi)
    assert bool(r.reliable)
    assert float(r.log_alias_bound) < got - math.log(1e6)
    assert float(r.log_truncation_estimate) < got - math.log(1e6)
    with pytest.raises(ValueError, match="epsilon"):
        jaxdp.characteristic_terms(jaxdp.PoissonSubsampledGaussian(sigma, q), epsilon=-1.0, num_steps=steps)


def test_public_terms_inside_a_users_jit_and_grad_with_x64_off():
    """``jaxdp.characteristic_terms`` as users call it: inside their ``jax.jit`` with x64 off (one program for the
    value and its gradient in sigma), the eager float64 value, and the gradient of a float64 central difference."""
    q, steps, eps = 0.01, 1000, 2.0

    def log_delta(sigma):
        return jaxdp.characteristic_terms(
            jaxdp.PoissonSubsampledGaussian(sigma, q), epsilon=eps, num_steps=steps
        ).log_delta

    assert not jax.config.jax_enable_x64
    value, grad = jax.jit(jax.value_and_grad(log_delta))(1.0)
    h = 1e-4
    eager = [float(log_delta(s)) for s in (1.0, 1.0 - h, 1.0 + h)]
    assert float(value) == pytest.approx(eager[0], rel=1e-6)
    assert float(grad) == pytest.approx((eager[2] - eager[1]) / (2 * h), rel=1e-5)
