"""Timing and formatting helpers shared by the benchmark scripts."""

from __future__ import annotations

import math
import statistics
import time

import jax


def measure(fn, repeats=20, *, warmup=True):
    """``(value, seconds)``: ``fn()``'s last value and the median wall time of ``repeats`` calls (results blocked on),
    after one untimed warm-up call (the compile, for jaxdp) unless ``warmup=False`` (a peer that caches nothing).
    The benchmarks' timing function, with :func:`once` for a single call."""
    if warmup:
        jax.block_until_ready(fn())
    times, value = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        value = jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return value, statistics.median(times)


def once(fn):
    """``(value, seconds)`` of one call of ``fn()`` (its result blocked on): a first call, its compile included, or
    a run too long to repeat."""
    t0 = time.perf_counter()
    value = jax.block_until_ready(fn())
    return value, time.perf_counter() - t0


def median_time(fn, repeats=20):
    """Median wall time of ``fn()`` (results blocked on) after one warm-up call (:func:`measure`)."""
    return measure(fn, repeats)[1]


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


def _git(*args):
    import pathlib
    import subprocess

    root = pathlib.Path(__file__).resolve().parent.parent
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def commit_of_checkout() -> str:
    """jaxdp's short commit (``unknown`` outside a git checkout): the one :func:`provenance` names."""
    return _git("rev-parse", "--short", "HEAD") or "unknown"


def provenance() -> str:
    """Where a measurement comes from: jaxdp's commit and whether the tree was clean, JAX and jaxlib, backend and
    devices, numpy and ml_dtypes (whose import is most of ``import jax``), CPU cores, Python and the date (UTC)."""
    import datetime
    import os
    import platform

    import jaxlib
    import ml_dtypes
    import numpy

    commit = commit_of_checkout()
    dirty = _git("status", "--porcelain", "--", "jaxdp", "benchmarks", "pyproject.toml")
    tree = "clean tree" if dirty == "" else "uncommitted changes" if dirty else "tree state unknown"
    devices = ", ".join(str(d) for d in jax.devices())
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"jaxdp `{commit}` ({tree}); JAX {jax.__version__} (jaxlib {jaxlib.__version__}), backend "
        f"`{jax.default_backend()}`, devices {devices}; numpy {numpy.__version__}, ml_dtypes {ml_dtypes.__version__}; "
        f"{os.cpu_count()} CPU cores ({platform.machine()}); "
        f"Python {platform.python_version()}; {now}."
    )
