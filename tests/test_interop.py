"""jaxdp.interop: dp_accounting's DpEvents as jaxdp mechanisms and the drop-in PrivacyAccountant.

References: dp_accounting's own PLD accountant (pessimistic, value_discretization_interval 1e-4) and RDP
accountant, on the same events, in the same process.  The PLD's discretisation moves epsilon by ~1e-4
relative here, so the tolerances are 2e-3 relative; jaxdp's values must also stay at or below
dp_accounting's RDP bound (looser).
"""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting import dp_event as ev
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

import jaxdp
from jaxdp.interop import UnsupportedEventError, from_dp_event, make_accountant

DELTA = 1e-5


def _pld(event):
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    return acc.compose(event).get_epsilon(DELTA)


def _rdp(event):
    return rdp_privacy_accountant.RdpAccountant().compose(event).get_epsilon(DELTA)


def _psg(q, sigma, n):
    return ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(sigma)), n)


CASES = {
    # name: (event, jaxdp method)
    "poisson_gaussian": (_psg(0.01, 1.1, 1000), None),  # the default: certified
    "schedule": (ev.ComposedDpEvent([_psg(0.01, 1.1, 500), _psg(0.02, 1.5, 300)]), "certified-fast"),
    "gaussian": (ev.SelfComposedDpEvent(ev.GaussianDpEvent(20.0), 50), "exact"),
    "mixture": (
        ev.SelfComposedDpEvent(ev.MixtureOfGaussiansDpEvent(1.2, [0.0, 1.0, 2.0], [0.9, 0.08, 0.02]), 200),
        "certified-fast",
    ),
}
SLOW = {"mixture"}  # a program of its own (~80 s to compile on two cores); run with -m slow


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(CASES)])
def test_accountant_matches_dp_accounting_pld_within_its_discretisation(name):
    event, method = CASES[name]
    acc = make_accountant(method=method)
    assert isinstance(acc, dp_accounting.PrivacyAccountant)
    got = acc.compose(event).get_epsilon(DELTA)
    ref = _pld(event)
    assert got == pytest.approx(ref, rel=2e-3), (got, ref)
    if name != "mixture":
        assert got <= _rdp(event) * (1 + 1e-9)  # tighter than dp_accounting's RDP bound
    if method == "exact":  # (get_delta is a second program: checked where it compiles in a second)
        assert acc.get_delta(got) == pytest.approx(DELTA, rel=1e-6)


def test_events_convert_to_the_mechanisms_they_describe():
    c = from_dp_event(ev.ComposedDpEvent([_psg(0.01, 1.1, 500), ev.GaussianDpEvent(3.0), ev.NoOpDpEvent()]), count=2)
    segs = [(type(m).__name__, n) for m, n in c.segments()]
    assert sorted(segs) == [("Gaussian", 2.0), ("PoissonSubsampledGaussian", 1000.0)]
    ((m, _n),) = [s for s in c.segments() if type(s[0]).__name__ == "PoissonSubsampledGaussian"]
    assert float(m.noise_multiplier) == 1.1 and float(m.sampling_prob) == 0.01
    lap = from_dp_event(ev.LaplaceDpEvent(2.5)).segments()[0][0]
    assert isinstance(lap, jaxdp.Laplace) and float(lap.noise_multiplier) == 2.5
    # a Poisson-sampled mixture: nobody sampled with probability 1 - q
    mog = from_dp_event(ev.PoissonSampledDpEvent(0.1, ev.MixtureOfGaussiansDpEvent(2.0, [1.0, 3.0], [0.5, 0.5])))
    m = mog.segments()[0][0]
    assert [float(x) for x in m.sensitivities] == [0.0, 1.0, 3.0]
    assert [float(x) for x in m.probs] == pytest.approx([0.9, 0.05, 0.05])
    assert from_dp_event(ev.NoOpDpEvent()) is None


def test_unsupported_and_non_private_events_are_refused_clearly():
    acc = make_accountant(method="rdp")
    rr = ev.RandomizedResponseDpEvent(0.5, 10)
    assert not acc.supports(rr)
    with pytest.raises(dp_accounting.UnsupportedEventError):
        acc.compose(rr)
    with pytest.raises(UnsupportedEventError, match="Poisson sampling of LaplaceDpEvent"):
        from_dp_event(ev.PoissonSampledDpEvent(0.1, ev.LaplaceDpEvent(1.0)))
    with pytest.raises(UnsupportedEventError, match="not private"):
        from_dp_event(ev.NonPrivateDpEvent())
    assert acc.get_epsilon(DELTA) == 0.0  # nothing composed yet
    acc.compose(ev.NonPrivateDpEvent())
    assert acc.get_epsilon(DELTA) == math.inf and acc.get_delta(1.0) == 1.0
    with pytest.raises(ValueError, match="neighboring_relation"):
        make_accountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    with pytest.raises(ValueError, match="target_delta"):
        make_accountant(method="rdp").compose(ev.GaussianDpEvent(1.0)).get_epsilon(0.0)


def test_one_line_switch_for_code_written_against_dp_accounting():
    def dp_sgd_epsilon(accountant):  # user code, written for dp_accounting
        accountant.compose(_psg(256 / 60000, 1.1, 2000))
        return accountant.get_epsilon(DELTA)

    theirs = dp_sgd_epsilon(rdp_privacy_accountant.RdpAccountant())
    ours = dp_sgd_epsilon(make_accountant(method="rdp"))
    assert ours == pytest.approx(theirs, rel=1e-2)  # the same RDP bound, jaxdp refines the orders (0.35 % here)
    assert ours <= theirs * (1 + 1e-9)
    assert acc_ledger_roundtrip()


def acc_ledger_roundtrip():
    acc = make_accountant(method="rdp")
    acc.compose(ev.GaussianDpEvent(2.0), 3)
    return acc.ledger == ev.SelfComposedDpEvent(ev.GaussianDpEvent(2.0), 3)
