"""Shared test configuration.

The suite deliberately does *not* turn on ``jax_enable_x64`` globally: jaxdp
must give float64 results under JAX's default (32-bit) configuration, and the
tests exercise exactly that.  Tests that need float64 *inputs* (finite
differences, vmapped parameter arrays) build them inside ``_helpers.x64()``.
"""

import os
import tempfile

import jax
import pytest
from hypothesis import HealthCheck, settings

# A persistent compilation cache shared by the xdist workers and across test modules: the
# calibration and certified programs are compiled by several modules (and doctests), and each
# compile takes 10-60 s on two cores.  The key covers the program, the options and the JAX
# version, so a stale entry is never used.
jax.config.update(
    "jax_compilation_cache_dir",
    os.environ.get("JAXDP_TEST_XLA_CACHE", os.path.join(tempfile.gettempdir(), "jaxdp-test-xla-cache")),
)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)

settings.register_profile(
    "jaxdp",
    max_examples=15,
    deadline=None,
    # the conformance suite's property tests are inherited by one class per accountant
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
    derandomize=True,
)
settings.load_profile("jaxdp")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks the conformance checks a class lists in ``slow_checks`` as slow (run with ``-m slow``)."""
    for item in items:
        cls = getattr(item, "cls", None)  # doctest items have none
        slow = getattr(cls, "slow_checks", ()) if cls is not None else ()
        if getattr(item, "originalname", item.name) in slow:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drops JAX's compiled programs after each test module.

    The certified and calibration tests compile large programs; kept for the whole
    run in one process they add up (a serial run once ended in a segmentation fault).
    """
    yield
    jax.clear_caches()
