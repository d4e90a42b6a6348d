"""Timing helper shared by the benchmark scripts."""

from __future__ import annotations

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
