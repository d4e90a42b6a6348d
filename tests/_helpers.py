"""Small helpers shared by the tests."""

from __future__ import annotations

import contextlib
import math

import jax
import pytest

from jaxdp.numerics import program_cache

# jaxdp's quick code generation (``program_cache.QUICK_COMPILE``, one option) as an ``XLA_FLAGS`` entry: the suite
# compiles with it (``tests/conftest.py``) and the user-mode matrix's user side without it (``test_user_mode.py``)
((_NAME, _VALUE),) = program_cache.QUICK_COMPILE
QUICK_CPU_FLAG = f"--{_NAME}={str(_VALUE).lower()}"

#: a check of machinery that any saddle-point estimate exercises: on the cheap one-Gaussian ``delta_2`` program in the
#: default run, on the split estimate (a compile of 1-8 min on two cores) with ``-m slow``
DELTA2_THEN_SPLIT = ["delta2", pytest.param("saddlepoint", marks=pytest.mark.slow)]


@contextlib.contextmanager
def x64():
    """Float64 inputs for finite differences and vmapped parameter arrays."""
    with jax.enable_x64(True):
        yield


def accountant_programs():
    """How many programs the accountants' entry points hold: their jits' and the on-disk program cache's (a
    concrete call runs a cached program, not the jit, when the cache is on)."""
    from jaxdp.accountants import _api
    from jaxdp.numerics import _program_cache

    jits = (_api._epsilon_jit, _api._log_delta_jit, _api._epsilon_fallback_jit, _api._log_delta_fallback_jit)
    return sum(j._cache_size() for j in jits) + len(_program_cache._LOADED)


def central_difference(f, x, rel_step=1e-5):
    """Float64 central finite difference of a scalar function of a float."""
    h = rel_step * max(abs(x), 1e-3)
    return (float(f(x + h)) - float(f(x - h))) / (2 * h)


def rel_err(a, b):
    return abs(float(a) - float(b)) / abs(float(b))


def complex_log_close(got, ref, rtol):
    """Complex logarithms agree up to a multiple of 2*pi*i (the branch)."""
    d = complex(got) - complex(ref)
    imag = (d.imag + math.pi) % (2 * math.pi) - math.pi
    return math.hypot(d.real, imag) <= rtol * abs(complex(ref))


def mechanism_for_row(row):
    """The jaxdp mechanism of a reference-table row (``tests/reference_values.py``)."""
    import jaxdp

    if row["mechanism"] == "gaussian":
        return jaxdp.Gaussian(row["sigma"])
    if row["mechanism"] == "poisson_gaussian":
        return jaxdp.PoissonSubsampledGaussian(row["sigma"], row["q"])
    return jaxdp.MixtureOfGaussians.poisson_group(row["sigma"], row["q"], row["group_size"])
