"""jaxdp's on-disk cache of compiled accountant programs (``jaxdp.numerics.program_cache``): a concrete query's
program is compiled once per machine, a later process loads it with the same answer, and the user's own JAX
configuration is left as it was."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import jax
import pytest

import jaxdp
from jaxdp.numerics import _program_cache, program_cache


@pytest.fixture
def cache_dir(tmp_path):
    previous = _program_cache._DIR
    program_cache.enable(tmp_path)
    _program_cache._LOADED.clear()
    yield tmp_path
    _program_cache._DIR = previous
    _program_cache._LOADED.clear()


def _eps(sigma):
    return float(jaxdp.epsilon_for_delta(jaxdp.Gaussian(sigma), delta=1e-6, num_steps=10, method="exact"))


def test_one_program_per_structure_with_the_plain_answer(cache_dir):
    program_cache.enable(None)
    plain = [_eps(s) for s in (2.0, 3.0)]
    program_cache.enable(cache_dir)
    compiled = program_cache.compiled_here()
    first = [_eps(s) for s in (2.0, 3.0)]  # one program for both values
    assert program_cache.compiled_here() == compiled + 1
    program_cache.forget_loaded()  # from disk, or compiled again where JAX's own cache supplied it (see below)
    again = [_eps(s) for s in (2.0, 3.0)]
    assert first == plain and again == plain


def test_a_compile_is_announced_once_per_method(cache_dir, caplog):
    with caplog.at_level(logging.WARNING, logger="jaxdp.compile"):
        _program_cache._NOTIFIED.discard("exact")
        _eps(2.0)
        jaxdp.delta_for_epsilon(jaxdp.Gaussian(2.0), epsilon=1.0, num_steps=10, method="exact")  # another program
    notes = [r.getMessage() for r in caplog.records if "compiling" in r.getMessage()]
    assert len(notes) == 1 and "'exact'" in notes[0] and str(cache_dir) in notes[0]


_CHILD = r"""
import json, sys, jax, jaxdp
from jaxdp.numerics import program_cache
g = jaxdp.Gaussian(2.0)
eps = float(jaxdp.epsilon_for_delta(g, delta=1e-6, num_steps=10, method="exact"))
if "more" in sys.argv:  # three more programs: another method, another structure, the other direction of the query
    jaxdp.epsilon_for_delta(g, delta=1e-6, num_steps=10, method="delta2")
    jaxdp.epsilon_for_delta(jaxdp.Composition.of((g, 3), (jaxdp.Gaussian(3.0), 4)), delta=1e-6, method="exact")
    jaxdp.delta_for_epsilon(g, epsilon=1.0, num_steps=10, method="exact")
print(json.dumps({"eps": eps, "compiled": program_cache.compiled_here(), "dir": str(program_cache.directory()),
                  "jax_cache": jax.config.jax_compilation_cache_dir}))
"""


def _child(env, *args):
    """A fresh process without JAX's own persistent cache (the tests' would supply executables: see below)."""
    drop = ("JAXDP_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")
    env = {k: v for k, v in os.environ.items() if k not in drop} | env
    out = subprocess.run([sys.executable, "-c", _CHILD, *args], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_a_second_process_loads_instead_of_compiling(tmp_path):
    env = {"JAXDP_CACHE_DIR": str(tmp_path / "c"), "XDG_CACHE_HOME": str(tmp_path / "home")}
    first, err = _child(env)
    second, err2 = _child(env)
    assert first["compiled"] == 1 and second["compiled"] == 0
    assert first["eps"] == second["eps"] == _eps_plain()
    assert first["dir"] == str(tmp_path / "c" / "programs")
    assert "compiling the 'exact' accountant" in err and "compiling" not in err2
    # the user's JAX configuration is untouched: no persistent cache of JAX's own was set
    assert first["jax_cache"] in (None, "")


def test_a_damaged_file_is_replaced(tmp_path):
    env = {"JAXDP_CACHE_DIR": str(tmp_path)}
    first, _ = _child(env)
    (path,) = (tmp_path / "programs").glob("*.xla")
    path.write_bytes(b"not a program")
    again, _ = _child(env)
    assert again["compiled"] == 1 and again["eps"] == first["eps"]
    assert path.read_bytes() != b"not a program"


def test_the_key_separates_methods_and_structures(tmp_path):
    out, _ = _child({"JAXDP_CACHE_DIR": str(tmp_path)}, "more")
    assert out["compiled"] == 4 and len(list((tmp_path / "programs").glob("*.xla"))) == 4


def test_off_and_the_default_directory(tmp_path):
    off, _ = _child({"JAXDP_CACHE_DIR": "off", "XDG_CACHE_HOME": str(tmp_path / "home")})
    assert off["dir"] == "None" and off["compiled"] == 0
    assert not (tmp_path / "home").exists()
    default, _ = _child({"XDG_CACHE_HOME": str(tmp_path / "home")})
    assert default["dir"] == str(tmp_path / "home" / "jaxdp" / "xla" / "programs") and default["compiled"] == 1


def _eps_plain():
    previous = _program_cache._DIR
    program_cache.enable(None)
    try:
        return _eps(2.0)
    finally:
        _program_cache._DIR = previous


def test_traced_arguments_bypass_the_cache(cache_dir):
    grad = jax.grad(lambda s: jaxdp.epsilon_for_delta(jaxdp.Gaussian(s), delta=1e-6, num_steps=10, method="exact"))
    assert float(grad(2.0)) < 0
    assert not list(cache_dir.glob("*.xla"))


def test_a_users_method_is_never_kept_on_disk(cache_dir, monkeypatch):
    """The key digests jaxdp's source, not a method a user registers (nor a mechanism class of theirs): such a
    program runs on the plain jit, so an edit of the user's code is never answered by a stale program."""
    import jax.numpy as jnp

    from jaxdp.accountants import _registry

    monkeypatch.setattr(_registry, "_METHODS", dict(_registry._METHODS))
    jaxdp.register_method(
        jaxdp.MethodInfo(
            "exact",  # even under a built-in's name
            certified=True,
            description="delta = 1",
            log_delta=lambda comp, direction, eps: jnp.zeros_like(eps),
            epsilon=lambda comp, direction, log_delta: jnp.full_like(log_delta, jnp.inf),
        )
    )
    assert float(jaxdp.delta_for_epsilon(jaxdp.Gaussian(2.0), epsilon=1.0, method="exact")) == 1.0
    assert not list(cache_dir.glob("*.xla"))


def test_a_method_registered_again_under_its_name_is_not_answered_by_the_old_program(monkeypatch):
    """Regression (a clean-clone CI, order-dependent): the in-memory jit keyed a user's method by its name, so a
    method registered again under the same name (an edit in a notebook, or a built-in's name) was answered by the
    program traced from the earlier one.  Keyed by the MethodInfo itself, each registration traces its own."""
    import jax.numpy as jnp

    from jaxdp.accountants import _registry

    monkeypatch.setattr(_registry, "_METHODS", dict(_registry._METHODS))
    mech = jaxdp.Gaussian(2.0)
    assert float(jaxdp.delta_for_epsilon(mech, epsilon=1.0, method="exact")) < 0.01  # the built-in, traced first
    for value in (0.5, 0.25):
        jaxdp.register_method(
            jaxdp.MethodInfo(
                "exact",
                certified=True,
                description=f"delta = {value}",
                log_delta=lambda comp, direction, eps, v=value: jnp.full_like(eps, jnp.log(v)),
                epsilon=lambda comp, direction, log_delta: jnp.full_like(log_delta, jnp.inf),
            )
        )
        assert float(jaxdp.delta_for_epsilon(mech, epsilon=1.0, method="exact")) == pytest.approx(value, rel=1e-12)


def test_a_program_from_jaxs_own_cache_is_not_copied(cache_dir, tmp_path):
    """Regression: an XLA:CPU executable loaded from JAX's persistent cache serialises without its code (its copy
    failed with "Function broadcast_add_fusion not found" when run); where a user's JAX cache supplies the program,
    it runs from memory and is not written here."""
    import jax.numpy as jnp

    from jaxdp.accountants import _api
    from jaxdp.accountants._staging import Facts

    with jax.enable_x64(True):
        args = (jaxdp.Composition.of((jaxdp.Gaussian(2.0), 10)), 1e-6)
        args = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), args)
        static = {"method": "exact", "facts": Facts()}
        leaves, treedef = jax.tree_util.tree_flatten(args)
        previous = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs)
        jax.config.update("jax_compilation_cache_dir", str(tmp_path / "jax-own"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        try:  # the user's cache gets the very program this cache compiles
            flat = _program_cache._flat(_api.epsilon_of_composition, static, treedef)
            jax.jit(flat).lower(*leaves).compile()
            first = program_cache.call(_api._epsilon_jit, _api.epsilon_of_composition, args, static)
            program_cache.forget_loaded()
            again = program_cache.call(_api._epsilon_jit, _api.epsilon_of_composition, args, static)
        finally:
            jax.config.update("jax_compilation_cache_dir", previous[0])
            jax.config.update("jax_persistent_cache_min_compile_time_secs", previous[1])
    assert float(again) == float(first) == _eps_plain()
    assert not list(cache_dir.glob("*.xla"))  # (what JAX's cache supplied stays in memory)


def test_the_command_line_keeps_its_stderr_to_errors_when_piped(cache_dir, capsys):
    """Regression (cold CI): the compile notice reached the command line's stderr, whose contract is one line per
    error, and broke the one-line checks of tests/test_cli.py on an empty cache.  Piped (not a terminal), the
    command line keeps the notice off its stderr."""
    from jaxdp.cli import main

    _program_cache._NOTIFIED.discard("exact")
    compiled = program_cache.compiled_here()
    assert main("epsilon --sigma 2 --q 1 --steps 10 --delta 1e-6 --method exact --mechanism gaussian".split()) == 0
    assert program_cache.compiled_here() == compiled + 1  # (it did compile)
    assert capsys.readouterr().err == ""


def test_disable_jit_runs_the_plain_function(cache_dir):
    """Regression: under ``jax.disable_jit`` (a user debugging), a concrete query ran the compiled program and
    failed ("Disable jit is not supported in the AOT path"); it runs the plain function, with the same answer."""
    ref = _eps(2.0)
    with jax.disable_jit():
        assert _eps(2.0) == pytest.approx(ref, rel=1e-12)


def test_quick_compile_options_where_xla_has_them():
    """A ``quick_compile`` method's concrete programs compile with ``QUICK_COMPILE`` where this XLA knows the options
    (jaxlib 0.10 does; 0.12 dropped them and compiles as usual), with the answer of the plain program, one program
    for every value, on disk or in memory alone; a method without the flag compiles as usual."""
    import jaxlib

    from jaxdp.accountants import _api
    from jaxdp.accountants._staging import of_concrete
    from jaxdp.mechanisms import as_composition
    from jaxdp.numerics import to_f64

    assert program_cache.quick_options(False) == ()
    quick = program_cache.quick_options(True)
    assert quick == (program_cache.QUICK_COMPILE if jaxlib.__version__.startswith("0.10.") else quick)
    assert quick in ((), program_cache.QUICK_COMPILE)
    from jaxdp.accountants._registry import compile_hints as hints

    assert hints(jaxdp.method_info("certified")).quick_compile and not hints(jaxdp.method_info("rdp")).quick_compile

    def ask(sigma):
        m = jaxdp.PoissonSubsampledGaussian(sigma, 0.01)
        return float(jaxdp.epsilon_for_delta(m, num_steps=100, delta=1e-6, method="delta2"))

    def plain(sigma):
        m = jaxdp.PoissonSubsampledGaussian(sigma, 0.01)
        with jax.enable_x64(True):
            args = (to_f64(as_composition(m, 100)), jax.numpy.float64(1e-6))
            return float(_api._epsilon_jit(*args, method="delta2", facts=of_concrete(m, 100)))

    previous = _program_cache._DIR
    try:
        program_cache.enable(None)  # (in memory: the path of JAXDP_CACHE_DIR=off and of a user's method)
        _program_cache._IN_MEMORY.clear()
        got = [ask(s) for s in (1.0, 1.5)]
        assert len(_program_cache._IN_MEMORY) == (1 if quick else 0)  # (one program for both values)
    finally:
        _program_cache._DIR = previous
    assert got == pytest.approx([plain(1.0), plain(1.5)], rel=1e-13)
