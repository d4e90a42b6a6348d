"""Smoke test of examples/train_digits.py (the full run, four settings with calibration, is a benchmark:
``python benchmarks/bench_training.py``)."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

import jaxdp

EXAMPLE = pathlib.Path(__file__).parents[1] / "examples" / "train_digits.py"


def _example():
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_private_run_learns_stops_at_the_budget_and_saves_the_figure(tmp_path):
    mod = _example()
    fig = tmp_path / "fig.png"
    args = ["--epsilon", "1.2", "--sigma", "1.5", "--epochs", "4", "--tracker-method", "rdp", "--no-progress"]
    (r,) = mod.main([*args, "--out", str(fig)])
    assert fig.stat().st_size > 10_000
    assert r["stopped_by_budget"] and 0 < r["steps"] < round(4 * 1437 / 64)
    # the budget stop is certified: epsilon after the steps taken is within it, one more step is not
    m = jaxdp.PoissonSubsampledGaussian(1.5, 64 / 1437)

    def eps(n):
        return float(jaxdp.epsilon_for_delta(m, num_steps=n, delta=1e-5, method="rdp"))

    assert eps(r["steps"]) <= 1.2 < eps(r["steps"] + 1)
    assert r["epsilon_certified"] == pytest.approx(eps(r["steps"]), rel=1e-9)
    assert r["accuracy"] > 0.6  # ten classes: chance is 0.1
