"""Certified accountant: proven upper bounds, checked against closed forms, the reference table and the peers."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference_values as ref
from _helpers import mechanism_for_row, x64
from conformance import AccountantConformance
from hypothesis import given
from hypothesis import strategies as st
from scipy import signal, stats

import jaxdp
from jaxdp import numerics
from jaxdp.accountants.certified import _constants, _lattice, _search
from jaxdp.accountants.certified import _window as _window_mod
from jaxdp.mechanisms import _log_ratio, as_composition
from jaxdp.numerics import to_f64


class TestCertifiedConformance(AccountantConformance):
    method = "certified"
    certified = True
    # the lattice spacing and window move (piecewise constantly) with sigma and q
    grad_rtol = 2e-3
    jit_rtol = 1e-9
    # eps(delta) and delta(eps) use windows tilted at slightly different points
    roundtrip_rtol = 1e-3

    # Monotonicity on the regime where the bound is tight.  With a handful of steps, q ~ 1e-3
    # and delta ~ 1e-11 the privacy-loss law is a spike plus a far slab that no single tilt
    # resolves; the bound stays valid there but can be several times loose and then moves
    # non-monotonically with the parameters (a known limitation, see the issue note).
    @given(
        sigma=st.floats(0.6, 4.0),
        q=st.floats(1e-2, 0.3),
        steps=st.integers(50, 3000),
        log10_delta=st.floats(-12, -3),
    )
    def test_monotone_in_sigma_q_and_steps(self, sigma, q, steps, log10_delta):
        super().test_monotone_in_sigma_q_and_steps.hypothesis.inner_test(self, sigma, q, steps, log10_delta)

    # each compiles a new 2^18-point FFT pipeline (10-30 s on 2 cores): run with -m slow
    slow_checks = frozenset(
        {
            "test_monotone_in_sigma_q_and_steps",
            "test_jit_equals_eager",
            "test_gradients_finite_on_a_grid",
            "test_grad_epsilon_wrt_q",
            "test_vmap_over_steps_and_delta",
            "test_add_or_remove_is_the_worse_direction",
            "test_heterogeneous_composition",
            "test_user_jit_equals_call",
            "test_traced_invalid_input_gives_nan",
            "test_grad_epsilon_wrt_sigma",  # d delta / d sigma (cheaper to compile) stays in the default run
            "test_vmap_equals_loop",  # vmap is exercised by test_bound_grows_with_steps_and_q_and_shrinks_with_sigma
            # (issue 42, fourth cut) certified's Gaussian epsilon program: above the closed form stays on its log
            # delta (test_gaussian_delta_upper_bounds_the_closed_form) and the one-step lattice
            "test_upper_bounds_the_exact_gaussian",
        }
    )


DELTA_ROWS = [r for r in ref.ROWS if r["query"] == "delta"]
EPS_ROWS = [r for r in ref.ROWS if r["query"] == "epsilon"]
_FAST_GROUP: set = set()  # every group row compiles a new mixture (15-30 s): run with -m slow


def _fast_row(r):
    return r["mechanism"] != "poisson_gaussian_group" or (r["case"], r["group_size"]) in _FAST_GROUP


def _eps(m, delta, steps):
    return float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=steps, method="certified"))


def _delta(m, eps, steps, method="certified"):
    return float(jaxdp.delta_for_epsilon(m, epsilon=eps, num_steps=steps, method=method))


# -- reference table: never below, and tight ---------------------------------------------------


@pytest.mark.parametrize("row", DELTA_ROWS, ids=lambda r: f"{r['case']}-eps{r['epsilon']}")
def test_reference_delta_rows(row):
    """Never below the reference (good to ~1e-5, ~1e-4 below 1e-12); within 1 % (target)."""
    got = _delta(mechanism_for_row(row), row["epsilon"], row["steps"])
    ref_tol = 1e-4 if row["delta"] < 1e-12 else 1e-5
    assert got >= row["delta"] * (1 - ref_tol)
    assert got <= row["delta"] * 1.01


@pytest.mark.parametrize(
    "row",
    [r if _fast_row(r) else pytest.param(r, marks=pytest.mark.slow) for r in EPS_ROWS],
    ids=lambda r: f"{r['case']}-{r.get('group_size', 1)}-{r['steps']}",
)
def test_reference_epsilon_rows(row):
    """Never below the reference (solved to 1e-5 absolute, group rows 1e-4); within 5e-4 relative
    (target), and never looser than dp_accounting's pessimistic PLD (discretisation 1e-4)."""
    got = _eps(mechanism_for_row(row), row["delta"], row["steps"])
    ref_tol = 1e-4 if row["mechanism"] == "poisson_gaussian_group" else 1e-5
    assert got >= row["epsilon"] - ref_tol
    assert got <= row["epsilon"] * (1 + 5e-4)
    if row.get("dp_accounting_pld") is not None:
        # no looser than the peer's proven bound, on every row (group rows: the closest is k = 8,
        # sigma = 1, measured -5.1e-8 relative; it was +4.2e-7 before the two-resolution lattice)
        assert got <= row["dp_accounting_pld"] * (1 + 1e-8)


@pytest.mark.parametrize(
    "row", [r for r in EPS_ROWS if r["mechanism"] == "poisson_gaussian"], ids=lambda r: f"{r['case']}-{r['steps']}"
)
def test_fast_grid_is_a_bound_too(row):
    """``certified-fast`` (8x coarser lattice, the calibration check): never below the reference,
    and within 2e-4 relative of it (measured worst +9.7e-5, at 14,040 steps)."""
    m = mechanism_for_row(row)
    fast = float(jaxdp.epsilon_for_delta(m, delta=row["delta"], num_steps=row["steps"], method="certified-fast"))
    assert row["epsilon"] - 1e-5 <= fast <= row["epsilon"] * (1 + 2e-4)


# -- closed-form Gaussian ---------------------------------------------------------------------


@pytest.mark.parametrize("sigma,steps", [(1.0, 1), (0.5, 10), (70.0, 1200)])
@pytest.mark.parametrize("eps", [0.5, 2.0, 6.0])
def test_gaussian_delta_upper_bounds_the_closed_form(sigma, steps, eps):
    m = jaxdp.Gaussian(sigma)
    exact = float(jaxdp.log_delta_for_epsilon(m, epsilon=eps, num_steps=steps, method="exact"))
    got = float(jaxdp.log_delta_for_epsilon(m, epsilon=eps, num_steps=steps, method="certified"))
    assert got >= exact - 1e-12
    assert got <= exact + 1e-3 * max(1.0, eps)  # 1e-3 relative in delta (more at tiny delta)


@pytest.mark.slow  # the Gaussian epsilon program (issue 42); the same bound on log delta stays in the default run
@pytest.mark.parametrize("delta", [1e-3, 1e-8, 1e-15])
def test_gaussian_epsilon_upper_bounds_the_closed_form(delta):
    m = jaxdp.Gaussian(0.9)
    exact = float(jaxdp.epsilon_for_delta(m, delta=delta, num_steps=30, method="exact"))
    got = _eps(m, delta, 30)
    assert exact <= got <= exact * (1 + 1e-4)


# -- where the peers fail ------------------------------------------------------------------------


#: Proven lower bounds on the true epsilon (add_or_remove is at least its remove direction): tests/_fft_reference.py's
#: TiltedLowerBound (numpy, none of jaxdp's code: every step's loss rounded down, n_fft 2**22), computed 2026-11-27;
#: ``test_saddlepoint.py::test_pinned_lower_bounds_are_what_the_oracle_gives`` (-m slow) shows how.
FFT_LOWER = {
    (2.0, 0.01, 3000, 1e-15): 2.3280019318743164,
    (1.0, 0.02, 300, 1e-6): 2.5883025259876735,  # dp_accounting's pessimistic PLD: 2.5883171 (+5.6e-6)
    (0.8, 0.1, 20, 1e-8): 8.76242164697564,  # PLD 8.7624237 (+2.3e-7)
}


def test_tight_at_delta_1e15_where_the_peers_fail():
    """sigma = 2, q = 0.01, 3000 steps at delta = 1e-15 (dp_accounting's PLD answers inf): never below the proven
    lower bound, and within 2e-5 of it (measured 1.2e-5).  (It was compared with jaxdp's own characteristic
    estimate, a consistency check between two of jaxdp's methods, not an independent one.)"""
    lower = FFT_LOWER[(2.0, 0.01, 3000, 1e-15)]
    got = _eps(jaxdp.PoissonSubsampledGaussian(2.0, 0.01), 1e-15, 3000)
    assert lower <= got <= lower * (1 + 2e-5)


def test_never_looser_than_dp_accounting_pld():
    """Between the proven lower bound and dp_accounting's pessimistic PLD (measured 5.1e-6 and 2.3e-7 above the
    lower bound).  (The lower side was jaxdp's characteristic estimate.)"""
    pld = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    for sigma, q, steps, delta in [(1.0, 0.02, 300, 1e-6), (0.8, 0.1, 20, 1e-8)]:
        p = pld.from_gaussian_mechanism(
            standard_deviation=sigma, sampling_prob=q, value_discretization_interval=1e-4, pessimistic_estimate=True
        )
        peer = p.self_compose(steps).get_epsilon_for_delta(delta)
        got = _eps(jaxdp.PoissonSubsampledGaussian(sigma, q), delta, steps)
        # no looser than the peer's bound (measured -5.3e-7 and -7.4e-9)
        assert FFT_LOWER[(sigma, q, steps, delta)] <= got <= peer * (1 + 1e-8)


def test_the_certified_checks_reject_a_bound_a_tenth_of_a_percent_below_the_truth():
    """The truth is at most the pessimistic PLD; the lower bounds above reject that x (1 - 1e-3), and the
    reference-table check (``test_reference_epsilon_rows``) rejects the table's epsilon x (1 - 1e-3) on every row."""
    for key, pld in [((1.0, 0.02, 300, 1e-6), 2.588317141372905), ((0.8, 0.1, 20, 1e-8), 8.762423725471834)]:
        assert not FFT_LOWER[key] <= pld * (1 - 1e-3)
    for row in EPS_ROWS:
        ref_tol = 1e-4 if row["mechanism"] == "poisson_gaussian_group" else 1e-5
        assert not row["epsilon"] * (1 - 1e-3) >= row["epsilon"] - ref_tol, row["case"]


@pytest.mark.slow
def test_few_steps_of_a_tiny_q_against_dp_accounting_pld():
    """Spike-and-slab laws (few steps, tiny q): the tilt search keeps the bound near the peer's.

    sigma = 2: 6% tighter than PLD(1e-4), whose grid is coarse for eps ~ 1e-3.  sigma = 1: 5e-5
    tighter (0.0207575 against 0.0207586).  It was 0.76% looser while the FFT error bound entered
    every window point in full; through Cauchy-Schwarz it is ~e^-6 of that.
    """
    pld = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    for sigma, slack in [(2.0, 0.0), (1.0, 0.0)]:
        p = pld.from_gaussian_mechanism(
            standard_deviation=sigma, sampling_prob=1e-4, value_discretization_interval=1e-4
        )
        peer = p.self_compose(10).get_epsilon_for_delta(1e-10)
        got = _eps(jaxdp.PoissonSubsampledGaussian(sigma, 1e-4), 1e-10, 10)
        assert got <= peer * (1 + slack)


# -- properties of a bound ---------------------------------------------------------------------


def test_bound_grows_with_steps_and_q_and_shrinks_with_sigma():
    with x64():
        f = jax.jit(
            jax.vmap(
                lambda s, q, d: jaxdp.delta_for_epsilon(
                    jaxdp.PoissonSubsampledGaussian(s, q), epsilon=2.0, num_steps=500, method="certified"
                ),
                in_axes=(0, 0, None),
            )
        )
        sig = jnp.array([0.7, 0.8, 1.0, 1.3, 1.0, 1.0, 1.0])
        q = jnp.array([0.02, 0.02, 0.02, 0.02, 0.01, 0.03, 0.05])
        d = np.asarray(f(sig, q, 0.0))
    assert np.all(np.diff(d[:4]) < 0)  # more noise, smaller delta
    assert d[4] < d[2] < d[5] < d[6]  # larger q, larger delta
    m = jaxdp.PoissonSubsampledGaussian(1.0, 0.02)
    steps = [50, 200, 800, 3200]
    eps = [_eps(m, 1e-8, n) for n in steps]
    assert all(a < b for a, b in itertools.pairwise(eps))


# -- the pieces of the bound -------------------------------------------------------------------


@pytest.mark.parametrize(
    "lo,hi", [(-40.0, -39.99999), (-3.0, -2.9999), (5.0, 5.00001), (-1.0, 2.0), (-50.0, -40.0), (-np.inf, -38.0)]
)
def test_log_normal_interval_matches_mpmath(lo, hi):
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    want = float(mp.log(mp.ncdf(hi) - mp.ncdf(lo)))
    with x64():
        got = float(numerics.log_normal_interval(lo, hi))
    assert got == pytest.approx(want, rel=1e-14, abs=1e-14)


@pytest.mark.parametrize("path", ["gathered", "everywhere", "scan"])
def test_interval_masses_within_their_error_bounds(path, monkeypatch):
    """Cell masses of a 5-component mixture and of N(0, s^2) against mpmath on the exact floating-point edges.

    Fine cells take the linear-space sum, wide ones (and the outer intervals) the log-space one: up to
    ``_BAD_CELLS`` gathered (``gathered``), or all cells when more are wide (``everywhere``); ``scan``
    sums the linear-space part by the online scan used for large mixtures.
    """
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    if path == "everywhere":
        monkeypatch.setattr(_lattice, "_BAD_CELLS", 4)
    if path == "scan":
        monkeypatch.setattr(_lattice, "UNROLL", 0)
        monkeypatch.setattr(_log_ratio, "UNROLL", 0)
    log_p, c, s = jaxdp.MixtureOfGaussians.poisson_group(1.3, 0.05, 4).mixture()
    rng = np.random.default_rng(0)
    fine = np.cumsum(rng.uniform(1e-6, 4e-4, 20000)) - 1.0  # -1 .. ~3
    wide = np.linspace(-9.0, -1.05, 40)  # cells 0.2 wide out at 5 deviations: log-space
    edges = np.concatenate([[-40 * 1.3], wide, fine, [fine[-1]], [4.0 + 40 * 1.3]])  # one empty cell
    with x64():
        mix, gauss, err_mix, err_gauss = map(np.asarray, _lattice._interval_log_masses(jnp.asarray(edges), log_p, c, s))
        log_p, c, s = np.asarray(log_p), np.asarray(c), float(s)
    xa, xb = edges[:-1], edges[1:]
    w = (xb - xa) / s
    m_far = np.maximum(np.abs(0.5 * (xa + xb) / s), np.abs(0.5 * (xa + xb) / s - c.max() / s))
    n_bad = int(np.sum(w * np.maximum(1.0, m_far) > _constants._FAST_NARROW))
    assert 40 < n_bad < 1024  # both kinds of cell are there (and more than _BAD_CELLS for "everywhere")
    assert mix[-2] == _constants._NEG and gauss[-2] == _constants._NEG  # the empty cell has no mass
    cells = np.concatenate([np.arange(45), [len(xa) - 1], rng.choice(np.arange(45, len(xa) - 2), 150, replace=False)])
    s_mp = mp.mpf(s)
    for j in cells:
        a, b = mp.mpf(xa[j]), mp.mpf(xb[j])
        want_g = mp.ncdf(b / s_mp) - mp.ncdf(a / s_mp)
        want_m = sum(
            mp.exp(mp.mpf(lp)) * (mp.ncdf((b - mp.mpf(ci)) / s_mp) - mp.ncdf((a - mp.mpf(ci)) / s_mp))
            for lp, ci in zip(log_p, c)
        )
        for got, want, err in ((mix[j], want_m, err_mix[j]), (gauss[j], want_g, err_gauss[j])):
            rel = abs(float(mp.exp(mp.mpf(got)) / want - 1))
            assert rel <= err, (j, rel, err)
            assert err < (1e-12 if 45 <= j < len(xa) - 1 else 1e-9)  # a bound that means something


# (one chunk: the path of every certified gradient in the conformance tests; many: the "everywhere" branch)
@pytest.mark.parametrize("few", [pytest.param(True, marks=pytest.mark.slow), False])
def test_wide_cells_loop_has_the_derivative_of_its_values(few, monkeypatch):
    """The wide cells' log-space masses run as one loop over chunks (one traced copy); a loop of data-dependent
    length has no reverse-mode derivative, so a custom rule supplies it.  Regression: that rule's derivative
    (reverse mode, in the mixture's sigma) against central differences of the loop's own values, with the wide
    cells in one chunk and in many."""
    if not few:
        monkeypatch.setattr(_lattice, "_BAD_CELLS", 4)
    log_p, c, _ = jaxdp.MixtureOfGaussians.poisson_group(1.3, 0.05, 4).mixture()
    edges = np.concatenate([np.linspace(-9.0, -1.05, 40), np.linspace(-1.0, 3.0, 2000)])
    with x64():
        edges, log_p, c = jnp.asarray(edges), jnp.asarray(log_p), jnp.asarray(c)

        def total(s):  # the wide cells at the low end, weighted so that no cell's error cancels another's
            mix, gauss, _, _ = _lattice._interval_log_masses(edges, log_p, c, s)
            return jnp.sum(jnp.exp(mix[:39]) * jnp.arange(1.0, 40.0)) + jnp.sum(jnp.exp(gauss[:39]))

        value_and_grad = jax.jit(jax.value_and_grad(total))
        got = float(value_and_grad(1.3)[1])
        h = 1e-5
        want = (float(value_and_grad(1.3 + h)[0]) - float(value_and_grad(1.3 - h)[0])) / (2 * h)
    assert got == pytest.approx(want, rel=1e-6)


_LOG_DELTA_EST = math.log(1e-6)


def _window(mech, steps, direction, eps):
    """The first lattice point, the window, and the (dense) lattice pmf of ``mech`` it uses."""
    with x64():
        comp = to_f64(as_composition(mech, steps))
        t = jax.jit(lambda c: _search._bounds.saddle_point(c, direction, eps))(comp)
        win = jax.jit(lambda c: _window_mod._build_window(c, direction, t, _LOG_DELTA_EST))(comp)
        z = _window_mod._tail_z(comp, _LOG_DELTA_EST)
        start, hi = _lattice._loss_range(*mech.mixture(), direction, z)
        size = _constants.LATTICE_SIZE
        pmf = _lattice._step_pmf(
            mech, direction, start, win.spacing, size, size // _constants.COARSE_SHARE, hi + win.spacing
        )
        index = np.asarray(pmf.index).astype(int)
        dense = np.zeros(index[-1] + 1)
        dense[index] = np.exp(np.asarray(pmf.log_pmf))  # on every lattice index (0 between coarse points)
        return float(start), win, dense, float(pmf.log_p_inf)


def test_single_step_lattice_dominates_the_exact_gaussian():
    """One connect-the-dots step: delta(eps) >= the closed form at every eps (Jensen), and close."""
    m = jaxdp.Gaussian(1.0)
    with x64():
        exact = jax.vmap(lambda e: jaxdp.log_delta_for_epsilon(m, epsilon=e, method="exact"))(
            jnp.linspace(0.05, 6.0, 40)
        )
    for e, ex in zip(np.linspace(0.05, 6.0, 40), np.asarray(exact)):
        got = float(jaxdp.log_delta_for_epsilon(m, epsilon=float(e), method="certified"))
        assert ex - 1e-13 <= got <= ex + 1e-5


def test_infinity_atom_is_the_gaussian_tail_beyond_the_lattice():
    """The +inf atom is the P-mass above the lattice: for the Gaussian, the tail past its top."""
    s = 0.8
    k = _constants.LATTICE_SIZE
    start = -(0.5 + 13 * s) / s**2  # loss at x = -13 s
    spacing = (1.0 + 19 * s) / s**2 / (k - 1)  # top of the lattice at x = 1 + 6 s
    with x64():
        pmf = _lattice._step_pmf(jaxdp.Gaussian(s), "remove", jnp.float64(start), jnp.float64(spacing))
        total = float(jnp.exp(jax.nn.logsumexp(pmf.log_pmf)))
    want = stats.norm.logsf(6.0)
    assert float(pmf.log_p_inf) >= want
    assert float(pmf.log_p_inf) == pytest.approx(want, rel=1e-9)
    assert total == pytest.approx(1.0 - math.exp(want), rel=1e-9)


def test_chernoff_term_bounds_the_mass_above_the_window(monkeypatch):
    """The dropped mass above the window is at most the Chernoff term (four steps, exact tail).

    A window of +-1 tilted deviation, 2^14 points (the lattice folded 8 times) leaves a
    sizeable mass above it.
    """
    monkeypatch.setattr(_window_mod, "WINDOW_SDS_BELOW", 1.0)
    monkeypatch.setattr(_window_mod, "WINDOW_SDS_ABOVE", 1.0)
    monkeypatch.setattr(_lattice, "NUM_BINS", 2**14)
    monkeypatch.setattr(_constants, "NUM_BINS", 2**14)
    mech = jaxdp.PoissonSubsampledGaussian(0.7, 0.3)
    start, win, p, log_p_inf = _window(mech, 4, "remove", 2.0)
    end = float(win.ell_start) + _constants.NUM_BINS * float(win.spacing)
    two = np.clip(signal.fftconvolve(p, p), 0.0, None)  # two steps (absolute error ~1e-17)
    ell2 = 2 * start + np.arange(two.size) * float(win.spacing)
    survival = np.cumsum(two[::-1])[::-1]  # P(two steps >= ell2_j)
    # P(four steps >= end) = sum_i two_i P(two steps >= end - l_i)
    j = np.ceil((end - ell2 - 2 * start) / float(win.spacing) - 1e-9).astype(int)
    tail = np.where(j < two.size, survival[np.clip(j, 0, two.size - 1)], 0.0)
    above = float(np.sum(two * tail)) + 4 * math.exp(log_p_inf)
    assert above > 1e-6  # the test has teeth
    assert above <= math.exp(float(win.log_rest))


def test_fft_error_bound_covers_the_actual_rounding_error():
    """The FFT error bound exceeds ``||computed - exact||_2`` over the window (exact: numpy direct
    convolution), and the untilting sum with its Cauchy-Schwarz term exceeds the exact one."""
    mech = jaxdp.PoissonSubsampledGaussian(1.0, 0.3)
    lo, win, p, _ = _window(mech, 2, "remove", 1.0)
    with np.errstate(divide="ignore"):
        tilted = np.log(p) + float(win.tilt) * np.arange(p.size) * float(win.spacing)
    v = np.exp(tilted - np.logaddexp.reduce(tilted))
    keep = np.flatnonzero(v > 1e-30)  # the rest adds < 1e-25 to any point, far below the bound
    first, last = keep[0], keep[-1] + 1
    exact = np.convolve(v[first:last], v[first:last])  # direct: the 2-fold law without FFT rounding
    ell = 2 * float(lo) + (2 * first + np.arange(exact.size)) * float(win.spacing)
    start = float(win.ell_start)
    idx = np.round((ell - start) / float(win.spacing)).astype(int)
    y_exact = np.zeros(_constants.NUM_BINS)
    np.add.at(y_exact, np.mod(idx, _constants.NUM_BINS), exact)  # the FFT convolves cyclically
    bound = math.exp(float(win.log_fft_error))
    y = np.exp(np.asarray(win.log_y))  # computed (clipped below at 1e-300)
    err = float(np.sqrt(np.sum((y - y_exact) ** 2)))
    assert 0.0 < err <= bound
    with x64():
        eps = 1.0
        log_w = np.asarray(_window_mod._log_weights(win, jnp.float64(eps)))
        exact_sum = float(np.sum(np.exp(log_w) * y_exact))
        log_with_term = np.logaddexp(
            float(jax.nn.logsumexp(win.log_y + log_w)), float(_window_mod._log_fft_term(win, log_w))
        )
    assert exact_sum > 0.0
    assert math.log(exact_sum) <= log_with_term


# -- validation -----------------------------------------------------------------------------------


def test_laplace_is_rejected_with_a_clear_error():
    with pytest.raises(ValueError, match="method='certified' does not support Laplace"):
        jaxdp.epsilon_for_delta(jaxdp.Laplace(1.0), delta=1e-5, num_steps=10, method="certified")


def test_unconverged_cell_edges_make_the_step_vacuous(monkeypatch):
    """Each cell edge's realised loss is checked; an edge off its target puts the step's whole
    mass on the +inf atom (a vacuous, still valid bound), never a wrong finite pmf."""
    m = jaxdp.MixtureOfGaussians.poisson_group(1.0, 0.1, 3)  # several c > 0: Newton's start is not the root
    with x64():
        args = ("remove", jnp.float64(-0.5), jnp.float64(1e-2), 2048)
        good = _lattice._step_pmf(m, *args)
        monkeypatch.setattr(_log_ratio, "NEWTON_MAX_ITER", 0)  # the edges stay at Newton's start
        bad = _lattice._step_pmf(m, *args)
    assert float(good.log_p_inf) < -10.0  # the P-mass above the lattice top (loss 20)
    assert float(bad.log_p_inf) == 0.0


@pytest.mark.slow
def test_certified_fast_gradient_through_its_second_pass():
    """certified-fast ranks its retried tilts in the steps of the solve's own scan, their inputs through
    ``stop_gradient`` (a failed tilt may have non-finite partials): at a query whose search takes the second pass
    the derivatives in sigma and q are finite and match float64 central differences."""
    from _helpers import central_difference

    from jaxdp.accountants._registry import compile_hints
    from jaxdp.accountants._staging import Facts
    from jaxdp.accountants.certified import _search

    sigma, q, steps, delta = 1.0, 1e-3, 100, 1e-5

    def eps(s, qq):
        mech = jaxdp.PoissonSubsampledGaussian(s, qq)
        return jaxdp.epsilon_for_delta(mech, num_steps=steps, delta=delta, method="certified-fast")

    with x64():
        comp = to_f64(as_composition(jaxdp.PoissonSubsampledGaussian(sigma, q), steps))
        ran = []
        compile_hints(jaxdp.method_info("certified-fast")).host_epsilon(
            comp, delta, facts=Facts(no_few_steps=True), call=lambda j, f, a, s: ran.append(j) or j(*a, **s)
        )
        assert _search._rank_jit in ran, "the query must take the second pass (its search ranks the retried tilts)"
        g_sigma, g_q = jax.grad(eps, argnums=(0, 1))(sigma, q)
        fd_sigma = central_difference(lambda s: eps(s, q), sigma)
        fd_q = central_difference(lambda qq: eps(sigma, qq), q)
    assert np.isfinite(float(g_sigma)) and np.isfinite(float(g_q))
    assert float(g_sigma) == pytest.approx(fd_sigma, rel=2e-3)
    assert float(g_q) == pytest.approx(fd_q, rel=2e-3)
