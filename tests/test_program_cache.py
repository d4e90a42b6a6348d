"""The on-disk cache of exported accountant programs (``jaxdp.numerics.program_cache``, used by the command
line): a warm process deserialises the traced program instead of tracing it again, with the same answer."""

from __future__ import annotations

import pytest

import jaxdp
from jaxdp.numerics import _program_cache, program_cache


@pytest.fixture
def cache_dir(tmp_path):
    program_cache.enable(tmp_path)
    _program_cache._LOADED.clear()
    yield tmp_path
    program_cache.enable(None)
    _program_cache._LOADED.clear()


def _eps(sigma):
    return float(jaxdp.epsilon_for_delta(jaxdp.Gaussian(sigma), delta=1e-6, num_steps=10, method="exact"))


def test_exported_program_is_written_read_and_agrees(cache_dir):
    program_cache.enable(None)
    plain = [_eps(s) for s in (2.0, 3.0)]
    program_cache.enable(cache_dir)
    first = [_eps(s) for s in (2.0, 3.0)]  # exported once (same structure), written
    files = list(cache_dir.glob("*.jaxexport"))
    assert len(files) == 1 and files[0].stat().st_size > 0
    _program_cache._LOADED.clear()  # a new process: read from disk
    again = [_eps(s) for s in (2.0, 3.0)]
    assert first == plain and again == plain


def test_a_damaged_file_is_replaced(cache_dir):
    ref = _eps(2.0)
    (path,) = cache_dir.glob("*.jaxexport")
    path.write_bytes(b"not a program")
    _program_cache._LOADED.clear()
    assert _eps(2.0) == ref
    assert path.read_bytes() != b"not a program"


def test_the_key_separates_methods_and_structures(cache_dir):
    m = jaxdp.Gaussian(2.0)
    jaxdp.epsilon_for_delta(m, delta=1e-6, num_steps=10, method="exact")
    jaxdp.epsilon_for_delta(m, delta=1e-6, num_steps=10, method="saddlepoint")
    jaxdp.epsilon_for_delta(jaxdp.Composition.of((m, 3), (jaxdp.Gaussian(3.0), 4)), delta=1e-6, method="exact")
    jaxdp.delta_for_epsilon(m, epsilon=1.0, num_steps=10, method="exact")
    assert len(list(cache_dir.glob("*.jaxexport"))) == 4
