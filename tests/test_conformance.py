"""Run the shared conformance suite over the foundation accountants."""

from conformance import AccountantConformance


class TestRdpConformance(AccountantConformance):
    method = "rdp"
    # the RDP bound is loose, so delta(eps(delta)) is only a bound-consistent round trip
    roundtrip_rtol = 1e-6


class TestExactConformance(AccountantConformance):
    method = "exact"
    subsampled = False
    steps = 4
