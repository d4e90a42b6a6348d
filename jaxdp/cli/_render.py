"""What the command line shows: the progress indicator, plots, JSON-safe numbers, and its compilation cache."""

from __future__ import annotations

import math
import os
import sys
import time


def with_progress(label, fn):
    """``fn()`` with an elapsed-time indicator on stderr (a TTY only) once it runs over two seconds."""
    import threading

    if not sys.stderr.isatty():
        return fn()
    done = threading.Event()

    def spin():
        if done.wait(2.0):
            return
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        start = time.perf_counter()
        bar = tqdm(total=None, desc=label, unit="s", file=sys.stderr, leave=False) if tqdm else None
        while not done.wait(0.5):
            if bar is not None:
                bar.set_postfix_str(f"{time.perf_counter() - start:.0f} s")
                bar.update(0)
            else:
                print(f"\r{label}: {time.perf_counter() - start:.0f} s", end="", file=sys.stderr, flush=True)
        if bar is not None:
            bar.close()
        else:
            print("", file=sys.stderr)

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        return fn()
    finally:
        done.set()
        thread.join()


def pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("--plot needs matplotlib (pip install 'jaxdp[plot]').") from None
    return plt


def finite_or_none(values):
    return [float(v) if math.isfinite(float(v)) else None for v in values]


def enable_compilation_cache():
    """Keep the command line's other compiled programs between runs (JAX's persistent cache).
    ``JAXDP_CACHE_DIR`` moves the cache (default ``$XDG_CACHE_HOME/jaxdp/xla``, i.e. ``~/.cache/jaxdp/xla``),
    ``JAXDP_CACHE_DIR=off`` turns it off, and a cache directory already configured for JAX is left alone."""
    import jax

    where = os.environ.get("JAXDP_CACHE_DIR")
    if where == "off" or jax.config.jax_compilation_cache_dir:
        return
    if not where:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        where = os.path.join(base, "jaxdp", "xla")
    try:
        os.makedirs(where, exist_ok=True)
    except OSError:  # read-only home: run uncached
        return
    jax.config.update("jax_compilation_cache_dir", where)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    # (the accountants' own programs are kept, compiled, by jaxdp.numerics.program_cache in ``where/programs``)
