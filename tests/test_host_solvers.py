"""The host-side searches of ``jaxdp.numerics`` (the calibrators', the tracker's and the group curve's loops over
per-query programs) on closed forms: each finds its answer, counts its evaluations as documented, and reads NaN as
the side the callers need."""

from __future__ import annotations

import math

import pytest

from jaxdp.numerics import host_bisect, host_largest_satisfying, host_regula_falsi


def test_host_bisect_keeps_the_half_that_holds_the_root():
    root = math.log(3.0)
    assert host_bisect(lambda x: x > root, -10.0, 10.0) == pytest.approx(root, abs=1e-12)
    calls = []
    assert host_bisect(lambda x: calls.append(x) or x > 2.0, 0.0, 4.0, iterations=20) == pytest.approx(2.0, abs=1e-5)
    assert len(calls) == 20


@pytest.mark.parametrize("threshold", [0, 1, 2, 7, 64, 999, 1000])
@pytest.mark.parametrize("guess", [1, 5, 100, 1000])
def test_host_largest_satisfying_finds_the_threshold_from_any_guess(threshold, guess):
    """``ok(n) = n <= threshold`` on [1, 1000]: the largest n that holds (0 where none does), with about
    2 log2(distance) + log2(distance) evaluations from the guess, never one outside [1, limit]."""
    calls = []

    def ok(n):
        assert 1 <= n <= 1000
        calls.append(n)
        return n <= threshold

    assert host_largest_satisfying(ok, guess, 1000) == min(threshold, 1000)
    distance = abs(guess - max(threshold, 1)) + 2
    assert len(calls) <= 3 * math.log2(distance) + 4


def test_host_regula_falsi_shrinks_the_bracket_to_its_tolerance():
    """A curved decreasing function (regula falsi alone would stall at one end): the upper end of a bracket of
    relative width 1e-8 around its root, on the side where f <= 0; a NaN region reads as positive."""
    root = 2.5
    f = lambda x: math.exp(-x) - math.exp(-root)  # noqa: E731
    hi = host_regula_falsi(f, 0.0, 40.0, f(0.0), f(40.0), rtol=1e-8, max_evaluations=200)
    assert f(hi) <= 0.0 and hi == pytest.approx(root, rel=2e-8)
    g = lambda x: math.nan if x < 1.0 else f(x)  # noqa: E731
    hi = host_regula_falsi(g, 0.0, 40.0, math.nan, f(40.0), rtol=1e-8, max_evaluations=200)
    assert g(hi) <= 0.0 and hi == pytest.approx(root, rel=2e-8)
    # the evaluation budget bounds the work: the bracket's upper end is always a point where f <= 0
    hi = host_regula_falsi(f, 0.0, 40.0, f(0.0), f(40.0), rtol=1e-8, max_evaluations=3)
    assert f(hi) <= 0.0 and hi > root
