"""Run the shared conformance suite over the accountants that have no test module of their own to hold it.

Every method of ``jaxdp.available_methods()`` runs the suite (``test_every_registered_method_runs_the_suite``):
``rdp`` and ``exact`` here, ``saddlepoint``, ``delta2-certified``, ``certified`` and ``characteristic`` in
their modules, and here ``delta2``, ``certified-fast`` and ``gil-pelaez``.  Of those three, the default run keeps
``certified-fast``'s checks that need nothing beyond its plain epsilon / delta programs (other default tests
compile them), a few more of the cheap ``delta2``, and registration and validation of the other; everything else
is in each class's ``slow_checks`` (``-m slow``).  The deprecated names of jaxdp 0.1.0 are checked at the end.
"""

import jax
import pytest
import test_certified
from conformance import AccountantConformance

import jaxdp
from jaxdp.accountants._registry import DEPRECATED_METHODS

#: the checks that compile no program beyond a method's plain epsilon(delta) and delta(eps) of the
#: Poisson-subsampled Gaussian (validation raises before anything is traced)
PLAIN = frozenset(
    {
        "test_method_is_registered",
        "test_returns_float64_scalars",
        "test_no_recompilation_on_new_values",
        "test_delta_of_epsilon_round_trip",
        "test_epsilon_validation",
        "test_delta_validation",
    }
)
#: the checks that compile nothing at all
NO_PROGRAM = frozenset({"test_method_is_registered", "test_epsilon_validation", "test_delta_validation"})
ALL_CHECKS = frozenset(name for name in dir(AccountantConformance) if name.startswith("test_"))


class TestRdpConformance(AccountantConformance):
    method = "rdp"
    # the RDP bound is loose, so delta(eps(delta)) is only a bound-consistent round trip
    roundtrip_rtol = 1e-6
    # programs of their own, under -m slow: the jitted query, and the user's jit, the NaN masking of traced invalid
    # input and the two vmaps, which are _api's wrapping, checked in the default run on exact (whose programs compile
    # in about a second); rdp keeps its gradients (a certified epsilon's gradient), its add direction and its
    # heterogeneous composition
    slow_checks = frozenset(
        {
            "test_jit_equals_eager",
            "test_user_jit_equals_call",
            "test_traced_invalid_input_gives_nan",
            "test_vmap_equals_loop",
            "test_vmap_over_steps_and_delta",
        }
    )


class TestExactConformance(AccountantConformance):
    method = "exact"
    subsampled = False
    steps = 4


class TestSaddlepointDelta2Conformance(AccountantConformance):
    """The one-Gaussian delta_2 approximation: its user's jit stays in the default run; its gradients there are
    test_user_mode.py's calibrators under jit(grad) (d delta / d sigma here, a program of its own: -m slow)."""

    method = "delta2"
    certified = False
    slow_checks = ALL_CHECKS - PLAIN - {"test_user_jit_equals_call"}


class TestCertifiedFastConformance(test_certified.TestCertifiedConformance):
    """``certified`` on an 8x coarser lattice: ``TestCertifiedConformance``'s tolerances and its monotonicity
    regime (inherited), and every check that compiles a program of its own under -m slow (each a lattice
    FFT pipeline, 10-60 s cold on two cores)."""

    method = "certified-fast"
    slow_checks = ALL_CHECKS - PLAIN


_REAL_AXIS = "gil-pelaez (a baseline) fails this check: "


class TestCharacteristicRealConformance(AccountantConformance):
    """The real-axis (Gil-Pelaez) inversion, a baseline (its registry entry: it loses its digits below delta
    ~ 1e-10).  Its quadrature noise (~1e-9..4e-6 relative) sets the tolerances of the transformation checks, and
    the round trip stops at 1e-6.  It *fails* four checks, kept as strict expected failures with the measured
    figures (a fix makes them pass and the marks must go).  No other default test compiles its
    Poisson-subsampled programs, so all but registration and validation run under -m slow."""

    method = "gil-pelaez"
    certified = False
    grad_rtol = 1e-5
    jit_rtol = 1e-5  # eager against jitted: 3.6e-6 at sigma 0.9 (measured; characteristic: 3.9e-11)
    transform_rtol = 1e-7  # user jit 1.5e-9, vmap 4.3e-8 (measured)
    directions_rtol = 1e-5  # 9.8e-7 at sigma 0.8, q 0.05, 200 steps, delta 1e-6
    roundtrip_deltas = (1e-3, 1e-6)
    slow_checks = ALL_CHECKS - NO_PROGRAM

    @pytest.mark.xfail(strict=True, reason=_REAL_AXIS + "vmap against the loop differs by 2.8e-6 at delta 1e-8")
    def test_vmap_over_steps_and_delta(self):
        super().test_vmap_over_steps_and_delta()

    @pytest.mark.xfail(strict=True, reason=_REAL_AXIS + "d delta / d sigma is 30 % off finite differences at 2e-8")
    def test_grad_delta_wrt_sigma(self):
        super().test_grad_delta_wrt_sigma()

    @pytest.mark.xfail(strict=True, reason=_REAL_AXIS + "d eps / d q is 5.8e-4 off finite differences")
    def test_grad_epsilon_wrt_q(self):
        super().test_grad_epsilon_wrt_q()

    # one step at small q: epsilon 0.677 at sigma 1, q 0.0039, delta 1e-5, and 0.212 at 51 steps
    @pytest.mark.xfail(strict=True, reason=_REAL_AXIS + "epsilon is not monotone in steps, q, sigma, delta")
    def test_monotone_in_sigma_q_and_steps(self):
        super().test_monotone_in_sigma_q_and_steps()


def test_every_registered_method_runs_the_suite():
    import test_characteristic
    import test_saddlepoint

    classes = [
        TestRdpConformance,
        TestExactConformance,
        TestSaddlepointDelta2Conformance,
        TestCertifiedFastConformance,
        TestCharacteristicRealConformance,
        test_certified.TestCertifiedConformance,
        test_characteristic.TestCharacteristicConformance,
        test_saddlepoint.TestSaddlepointConformance,
        test_saddlepoint.TestSaddlepointCertifiedConformance,
    ]
    assert all(issubclass(c, AccountantConformance) for c in classes)
    assert sorted(c.method for c in classes) == sorted(jaxdp.available_methods())
    for c in classes:  # the flags the suite checks against the registry
        assert c.certified == jaxdp.method_info(c.method).certified, c.method
    assert jax.config.jax_enable_x64 is False  # the suite runs as users do (tests/conftest.py)


@pytest.mark.parametrize("old", sorted(DEPRECATED_METHODS))
def test_a_deprecated_name_is_the_new_method_with_a_warning(old):
    """jaxdp 0.1.0's method names (one release): ``method_info`` answers the new method itself, with a
    ``DeprecationWarning`` attributed to the caller that names the new one; the names listed are the new ones."""
    new = DEPRECATED_METHODS[old]
    with pytest.warns(DeprecationWarning, match=f"method='{old}' is deprecated.*it is now '{new}'") as record:
        info = jaxdp.method_info(old)
    assert info is jaxdp.method_info(new)
    assert record[0].filename == __file__
    assert old not in jaxdp.available_methods() and new in jaxdp.available_methods()


def test_a_deprecated_name_answers_as_the_new_one():
    """Through the entry points: the same programs, so the same value bit for bit (the cheap ``delta2``)."""
    m = jaxdp.PoissonSubsampledGaussian(1.1, 0.01)
    want = float(jaxdp.epsilon_for_delta(m, delta=1e-5, num_steps=1000, method="delta2"))
    with pytest.warns(DeprecationWarning, match="saddlepoint-delta2"):
        got = float(jaxdp.epsilon_for_delta(m, delta=1e-5, num_steps=1000, method="saddlepoint-delta2"))
    assert got == want
