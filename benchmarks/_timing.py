"""Timing and formatting helpers shared by the benchmark scripts."""

from __future__ import annotations

import math
import statistics
import time

import jax


def median_time(fn, repeats=20):
    """Median wall time of ``fn()`` (results blocked on) after one warm-up call."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def timed(fn):
    """``(value, seconds, error name or None)``: the peers raise at small delta; record it."""
    t0 = time.perf_counter()
    try:
        value = fn()
    except Exception as err:
        return None, time.perf_counter() - t0, type(err).__name__
    return value, time.perf_counter() - t0, None


def rel(x, ref):
    """Signed relative error for a table cell (``n/a`` when missing or not finite)."""
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{(x - ref) / ref:+.1e}"
