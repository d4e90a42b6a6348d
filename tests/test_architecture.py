"""The package's layering and import rules, and a third-party accountant through ``register_method``.

Layers (each may import only those below it): ``numerics`` < ``mechanisms`` < ``accountants`` <
``calibration`` < ``training``/``interop`` < ``cli``/``jaxdp`` (the public face).  A private name (leading underscore, a
module or an attribute) is used only inside its own package and its subpackages, except those of
``numerics``; an accountant uses another's public functions only (what they share is in ``_cgf``).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import math
import pathlib

import jax
import jax.numpy as jnp
import pytest

import jaxdp
from jaxdp.accountants import _registry

ROOT = pathlib.Path(jaxdp.__file__).parent
LAYERS = {"numerics": 0, "mechanisms": 1, "accountants": 2, "calibration": 3, "training": 4, "interop": 4}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _package_of(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def _layer(module: str):
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def _is_module(name):
    path = ROOT.parent / name.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _top_level(tree):
    """The statements run when the module is imported: not inside a function or class, nor a ``TYPE_CHECKING``
    block."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            todo += node.orelse
            continue
        yield node
        todo += [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)]


def _imports(path: pathlib.Path, top_level=False):
    """``(line, target module, imported name or None)`` for every import of jaxdp in ``path`` (``top_level``: only
    those run when the module is imported)."""
    me = _module_name(path)
    tree = ast.parse(path.read_text())
    out = []
    for node in _top_level(tree) if top_level else ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jaxdp"):
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                # ``from pkg import _module`` imports a module; ``from module import name`` a name
                if _is_module(target):
                    out.append((node.lineno, target, None))
                else:
                    out.append((node.lineno, node.module, alias.name))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name.startswith("jaxdp")]
    return me, out


def _sources():
    return sorted(p for p in ROOT.rglob("*.py"))


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_import_rules(path):
    me, imports = _imports(path)
    my_pkg = _package_of(me, path.name == "__init__.py")
    my_layer = _layer(me)
    for line, target, name in imports:
        where = f"{path.relative_to(ROOT)}:{line} imports {target}{'.' + name if name else ''}"
        target_layer = _layer(target)
        if my_layer is not None and target_layer is not None:
            assert target_layer <= my_layer, f"upward import: {where}"
        if target.split(".")[:2] == ["jaxdp", "numerics"]:
            continue  # numerics is shared by all
        # the target's package: the module itself when it names a package, else its parent
        target_path = ROOT.parent / target.replace(".", "/")
        target_pkg = target if (target_path / "__init__.py").exists() else target.rpartition(".")[0]
        if my_pkg == target_pkg or my_pkg.startswith(target_pkg + "."):
            continue  # inside one package (its subpackages included), private modules and names are shared
        # a private module or subpackage belongs to the package that holds it: its modules (and theirs) may import it
        parts = target.split(".")
        owners = [".".join(parts[:i]) + "." for i, p in enumerate(parts) if i and p.startswith("_")]
        private = [owner for owner in owners if not (me + ".").startswith(owner)]
        assert not private, f"private module across packages: {where}"
        assert not (name and name.startswith("_")), f"private name across packages: {where}"


def test_the_public_face_lists_each_name_once_for_both_readers():
    """``jaxdp/__init__.py`` names its exports twice, for the lazy ``__getattr__`` and, in its ``TYPE_CHECKING``
    block, for type checkers: both say the same, and every name resolves to the subpackage's own object."""
    import importlib

    tree = ast.parse((ROOT / "__init__.py").read_text())
    static = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                static.update({a.name: imp.module for a in imp.names})
    assert static == jaxdp._EXPORTS
    for name, module in static.items():
        assert getattr(jaxdp, name) is getattr(importlib.import_module(module), name)


def test_no_jax_array_is_made_at_import():
    """No module makes a JAX array when it is imported (a module-level ``jnp.`` call): ``import jaxdp`` imports the
    accountants on first use, which may be inside a user's ``jit``, where such an array is a tracer of that trace
    and leaks into the next (regression: ``certified-fast`` after ``certified`` under a user's jit failed with
    UnexpectedTracerError on the certified search's ``jnp.array`` constants); it would also take the user's x64
    setting at import.  NumPy constants are the rule."""
    bad = []
    for path in _sources():
        for node in ast.parse(path.read_text()).body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if value is None:
                continue
            for call in ast.walk(value):
                func = call.func if isinstance(call, ast.Call) else None
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "jnp":
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, bad


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_attribute_of_another_module(path):
    """``module._name`` on an imported jaxdp module (e.g. ``_saddlepoint._k012``) is not used."""
    tree = ast.parse(path.read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jaxdp"):
            modules |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            modules |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("jaxdp")}
    bad = [
        f"{path.relative_to(ROOT)}:{n.lineno} {n.value.id}.{n.attr}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id in modules
        and n.attr.startswith("_")
        and not n.attr.startswith("__")
    ]
    assert not bad


# primitives whose lowering builds constants in the dtype the x64 flag allows at *lowering* time: a
# float64 operand recorded in the x64 scope but lowered by a user's x64-off jax.jit fails to compile
# (jaxdp.numerics.argmax/argmin lower to plain reductions instead)
X64_UNSAFE_CALLS = {"argmax", "argmin", "nanargmax", "nanargmin"}


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_primitive_whose_lowering_depends_on_the_x64_flag(path):
    tree = ast.parse(path.read_text())
    bad = [
        f"{path.relative_to(ROOT)}:{n.lineno} {n.value.id}.{n.attr}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id in {"jnp", "lax"}
        and n.attr in X64_UNSAFE_CALLS
    ]
    assert not bad


def test_every_method_declares_its_support():
    for name in jaxdp.available_methods():
        info = jaxdp.method_info(name)
        assert callable(info.supports)
        assert info.supports(jaxdp.Composition.of((jaxdp.Gaussian(1.0), 2)))


@pytest.mark.parametrize("method", ["exact", "certified", "certified-fast"])
def test_unsupported_pair_is_one_clear_value_error(method):
    with pytest.raises(ValueError, match=f"method='{method}' does not support Laplace; methods that do: 'rdp'"):
        jaxdp.epsilon_for_delta(jaxdp.Laplace(1.0), delta=1e-5, num_steps=10, method=method)
    with pytest.raises(ValueError, match="does not support"):
        jaxdp.delta_for_epsilon(jaxdp.Laplace(1.0), epsilon=1.0, num_steps=10, method=method)


# -- a third-party accountant -------------------------------------------------------------------------------------

_TILTS = jnp.geomspace(1e-3, 1e4, 400)


def _chernoff_log_delta(comp, direction, epsilon):
    """``delta(eps) <= min_t exp(K(t) - t eps) t^t / (1 + t)^(1 + t)`` (a Chernoff-type bound), on a grid of ``t``."""
    k = jax.vmap(lambda t: comp.cgf(t, direction))(_TILTS)
    t = _TILTS
    return jnp.min(k - t * epsilon + t * jnp.log(t) - (1 + t) * jnp.log1p(t))


def _chernoff_epsilon(comp, direction, log_delta):
    k = jax.vmap(lambda t: comp.cgf(t, direction))(_TILTS)
    t = _TILTS
    return jnp.maximum(jnp.min((k + t * jnp.log(t) - (1 + t) * jnp.log1p(t) - log_delta) / t), 0.0)


def _gaussian_only(comp):
    return all(isinstance(m, jaxdp.Gaussian) for m in comp.mechanisms)


@pytest.fixture
def toy_method(monkeypatch):
    monkeypatch.setattr(_registry, "_METHODS", dict(_registry._METHODS))
    jaxdp.register_method(
        jaxdp.MethodInfo(
            "toy-chernoff",
            certified=True,
            description="Chernoff bound on a grid of tilts (a third-party example)",
            log_delta=_chernoff_log_delta,
            epsilon=_chernoff_epsilon,
            supports=_gaussian_only,
        )
    )
    return "toy-chernoff"


def test_a_method_is_two_traceable_functions_and_a_supports_rule(monkeypatch):
    """Issue 45: what a method is has six fields; policy across methods is a combinator's, and how the entry points
    compile a method is said where it is registered (``CompileHints``), not in the method."""
    from jaxdp.accountants._registry import compile_hints

    fields = [f.name for f in dataclasses.fields(jaxdp.MethodInfo)]
    assert fields == ["name", "certified", "description", "log_delta", "epsilon", "supports"]
    certified, rdp = jaxdp.method_info("certified"), jaxdp.method_info("rdp")
    assert compile_hints(certified).staged and compile_hints(certified).quick_compile
    assert all(compile_hints(jaxdp.method_info(n)).direction_as_data for n in jaxdp.available_methods())
    assert not compile_hints(rdp).staged and not compile_hints(rdp).quick_compile
    # a method not registered (given as method=) has no hints; registered, those it was registered with
    toy = jaxdp.MethodInfo(
        "toy-hints", certified=True, description="", log_delta=_chernoff_log_delta, epsilon=_chernoff_epsilon
    )
    assert compile_hints(toy) == _registry.NO_HINTS
    monkeypatch.setattr(_registry, "_METHODS", dict(_registry._METHODS))
    jaxdp.register_method(toy, staged=True)
    assert compile_hints(toy) == _registry.CompileHints(staged=True)
    with pytest.raises(ValueError, match="not registered here"):
        _registry.register_methods((toy,), hints={"elsewhere": _registry.NO_HINTS})


def test_third_party_accountant_through_register_method(toy_method):
    assert toy_method in jaxdp.available_methods()
    m = jaxdp.Gaussian(2.0)
    eps = jaxdp.epsilon_for_delta(m, delta=1e-5, num_steps=100, method=toy_method)
    exact = jaxdp.epsilon_for_delta(m, delta=1e-5, num_steps=100, method="exact")
    assert eps.dtype == jnp.float64
    # a valid bound: above the exact curve, and not absurdly loose
    assert float(exact) <= float(eps) <= 1.3 * float(exact)
    log_d = jaxdp.log_delta_for_epsilon(m, epsilon=float(eps), num_steps=100, method=toy_method)
    assert float(log_d) == pytest.approx(math.log(1e-5), abs=0.05)
    # the entry points give it validation, jit, grad and vmap
    with pytest.raises(ValueError, match="delta"):
        jaxdp.epsilon_for_delta(m, delta=2.0, method=toy_method)
    with pytest.raises(ValueError, match="does not support PoissonSubsampledGaussian"):
        jaxdp.epsilon_for_delta(jaxdp.PoissonSubsampledGaussian(1.0, 0.01), delta=1e-5, method=toy_method)
    g = jax.grad(lambda s: jaxdp.epsilon_for_delta(jaxdp.Gaussian(s), delta=1e-5, num_steps=100, method=toy_method))
    assert float(g(2.0)) < 0
    with jax.enable_x64(True):  # float64 inputs (x64 off, traced values come back as float32: test_user_mode)
        sig = jnp.array([1.5, 2.0, 3.0])
        batched = jax.vmap(lambda s: jaxdp.epsilon_for_delta(jaxdp.Gaussian(s), delta=1e-5, method=toy_method))(sig)
    looped = [float(jaxdp.epsilon_for_delta(jaxdp.Gaussian(float(s)), delta=1e-5, method=toy_method)) for s in sig]
    assert [float(b) for b in batched] == pytest.approx(looped, rel=1e-12)


def test_a_staged_method_compiles_its_rare_branch_only_where_concrete_inputs_take_it(monkeypatch):
    """``register_method(..., staged=True)`` (jaxdp/accountants/_staging.py): on concrete inputs the entry points
    trace the method under ``Facts.light`` first, where it may answer NaN instead of tracing a rare branch, and run the
    full program only then; traced inputs get the full program alone; both answer the same."""
    from jaxdp.accountants._staging import assumed

    monkeypatch.setattr(_registry, "_METHODS", dict(_registry._METHODS))
    traced = []

    def log_delta(comp, direction, epsilon):
        facts = assumed()
        traced.append(facts)
        full = _chernoff_log_delta(comp, direction, epsilon)
        rare = comp.gaussian_mu2() > 0.5  # (stands for "the first pass failed": sigma < ~1.4 here)
        return jnp.where(rare, jnp.nan, full) if facts.light else full

    jaxdp.register_method(
        jaxdp.MethodInfo(
            "toy-staged",
            certified=True,
            description="",
            log_delta=log_delta,
            epsilon=_chernoff_epsilon,
            supports=_gaussian_only,
        ),
        staged=True,
    )
    with jax.enable_x64(True):
        want = {
            s: float(jnp.exp(_chernoff_log_delta(jaxdp.Composition.of((jaxdp.Gaussian(s), 1)), "remove", 1.0)))
            for s in (2.0, 1.0)
        }
    assert float(jaxdp.delta_for_epsilon(jaxdp.Gaussian(2.0), epsilon=1.0, method="toy-staged")) == pytest.approx(
        want[2.0], rel=1e-12
    )
    assert [f.light for f in traced] == [True]
    got = float(jaxdp.delta_for_epsilon(jaxdp.Gaussian(1.0), epsilon=1.0, method="toy-staged"))
    assert got == pytest.approx(want[1.0], rel=1e-12)  # the full program's answer where the light one is NaN
    assert [f.light for f in traced] == [True, False]
    user = jax.jit(lambda s: jaxdp.delta_for_epsilon(jaxdp.Gaussian(s), epsilon=1.0, method="toy-staged"))(1.0)
    assert float(user) == pytest.approx(want[1.0], rel=1e-6)  # (float32: x64 off)
    assert not any(f.light for f in traced[2:])  # (the full program again, or its cached trace)


def test_a_staged_epsilon_runs_its_host_search_first_then_the_full_program(monkeypatch):
    """For epsilon a staged method with ``CompileHints.host_epsilon`` (the certified search, its passes as programs
    of their own) answers through that first, and the full program (compiled only then) answers where it gave NaN;
    without one, epsilon's tiers are delta's (the light program, then the full one)."""
    from jaxdp.accountants._staging import assumed

    monkeypatch.setattr(_registry, "_METHODS", dict(_registry._METHODS))
    traced, hosted = [], []

    def epsilon(comp, direction, log_delta):
        traced.append(assumed().light)
        return _chernoff_epsilon(comp, direction, log_delta)

    def host(comp, delta, *, facts, call):
        hosted.append(facts.light)
        value = _chernoff_epsilon(comp, "remove", jnp.log(delta))
        return jnp.where(comp.gaussian_mu2() > 0.5, jnp.nan, value)  # (NaN stands for "every bound failed")

    info = jaxdp.MethodInfo(
        "toy-host",
        certified=True,
        description="",
        log_delta=_chernoff_log_delta,
        epsilon=epsilon,
        supports=_gaussian_only,
    )
    _registry.register_methods((info,), hints={"toy-host": _registry.CompileHints(staged=True, host_epsilon=host)})
    with jax.enable_x64(True):
        want = {
            s: float(_chernoff_epsilon(jaxdp.Composition.of((jaxdp.Gaussian(s), 1)), "remove", math.log(1e-5)))
            for s in (2.0, 1.0)
        }
    got = float(jaxdp.epsilon_for_delta(jaxdp.Gaussian(2.0), delta=1e-5, method="toy-host"))
    assert got == pytest.approx(want[2.0], rel=1e-12)
    assert hosted == [False] and traced == []  # (the host search alone: no program of the method's own)
    got = float(jaxdp.epsilon_for_delta(jaxdp.Gaussian(1.0), delta=1e-5, method="toy-host"))
    assert got == pytest.approx(want[1.0], rel=1e-12)  # the full program's answer where the host search is NaN
    assert hosted == [False, False] and traced == [False]

    traced.clear()
    jaxdp.register_method(dataclasses.replace(info, name="toy-no-host"), staged=True)
    jaxdp.epsilon_for_delta(jaxdp.Gaussian(2.0), delta=1e-5, method="toy-no-host")
    assert traced == [True]  # the light program, which answered


@pytest.mark.parametrize("method", ["certified-fast", pytest.param("certified", marks=pytest.mark.slow)])
def test_the_certified_host_search_gives_the_traced_programs_values(method):
    """The certified search for concrete inputs (``certified._search.host_epsilon``: pass 1 per direction, the
    ranking and pass 2 as programs of their own, compiled only where a query reaches them) answers what the traced
    program does, at queries whose search takes one pass and two, both directions and one (the fine lattice's
    traced program takes ~40 s to compile: -m slow)."""
    from jaxdp.accountants import _api
    from jaxdp.accountants._staging import Facts
    from jaxdp.accountants.certified import _search
    from jaxdp.mechanisms import as_composition
    from jaxdp.numerics import to_f64

    cases = [
        (jaxdp.PoissonSubsampledGaussian(1.1, 0.01), 1000, 1e-5),  # one pass
        (jaxdp.PoissonSubsampledGaussian(1.0, 1e-3), 1000, 1e-5),  # two (the startup benchmark's second-pass query)
        # one direction (static: programs of their own, ~20 s to compile; checked with the fine lattice, -m slow)
        (jaxdp.PoissonSubsampledGaussian(1.0, 1e-3, adjacency="remove"), 4, 1e-6),
        # (remove takes the second pass and its value falls: the add pass, skipped, runs again with it)
        (jaxdp.PoissonSubsampledGaussian(1.0, 1e-4), 100, 1e-5),
    ]
    host = _registry.compile_hints(jaxdp.method_info(method)).host_epsilon
    for k, (mech, steps, delta) in enumerate(cases):
        if k == 2 and method != "certified":
            continue
        ran = []

        def call(jitted, fn, args, static, ran=ran):
            ran.append(jitted)
            return jitted(*args, **static)

        with jax.enable_x64(True):
            comp = to_f64(as_composition(mech, steps))
            got = float(host(comp, jnp.float64(delta), facts=Facts(), call=call))
            # the traced program: the full one, both passes in one trace
            traced = float(_api._epsilon_jit(comp, jnp.float64(delta), method=method, facts=Facts()))
        assert got == pytest.approx(traced, rel=1e-9, abs=1e-12), (method, k)
        if k in (1, 3):
            assert _search._rank_jit in ran  # (the query must take the second pass)
        if k == 3 and method == "certified-fast":
            assert ran.count(_search._pass_jit) == 4  # (both first passes, remove's second, add's again)
        if k == 0:
            assert ran == [_search._pass_jit] * 2  # (one pass per direction, no ranking)


def test_the_certified_host_search_answers_nan_for_an_invalid_query():
    """A mechanism rebuilt by pytree operations is never checked by its constructor: the host-staged search answers
    NaN for its out-of-range parameters, as the traced program does (regression: it answered 0 at sigma = -1,
    q = -0.01, and a number at q = 1.5)."""
    from jaxdp.accountants._staging import Facts
    from jaxdp.mechanisms import as_composition
    from jaxdp.numerics import to_f64

    psg = jaxdp.PoissonSubsampledGaussian(1.0, 0.01)
    host = _registry.compile_hints(jaxdp.method_info("certified-fast")).host_epsilon
    for leaves in ([-1.0, -0.01], [1.0, 0.0], [3.0, 1.5]):
        bad = jax.tree.unflatten(jax.tree.structure(psg), leaves)
        with jax.enable_x64(True):  # (the host search alone: the entry point's full program answers NaN after it)
            comp = to_f64(as_composition(bad, 1000))
            got = host(comp, jnp.float64(1e-5), facts=Facts(), call=lambda j, f, a, s: j(*a, **s))
        assert math.isnan(float(got)), leaves


def test_register_method_rejects_bad_infos():
    with pytest.raises(TypeError):
        jaxdp.register_method("rdp")
    bad = jaxdp.MethodInfo("x", certified=False, description="", log_delta=None, epsilon=None)
    with pytest.raises(ValueError, match="log_delta"):
        jaxdp.register_method(bad)
    orphan = jaxdp.screened(
        jaxdp.MethodInfo("y", certified=True, description="", log_delta=_chernoff_log_delta, epsilon=_chernoff_epsilon),
        by="nope",
    )
    with pytest.raises(ValueError, match="unregistered method 'nope'"):
        jaxdp.register_method(orphan)
    with pytest.raises(TypeError, match="plain MethodInfo"):  # (combinators take a method, not a combined one)
        jaxdp.with_fallback(orphan, fallback="rdp", log_delta_or_nan=None, epsilon_or_nan=None)
    assert "x" not in jaxdp.available_methods() and "y" not in jaxdp.available_methods()


# -- policy across methods: combinators that return a method ------------------------------------------------


def test_with_fallback_answers_with_the_fallback_only_where_the_estimate_gives_nan(monkeypatch):
    """``jaxdp.with_fallback``: the estimate's answer where its ``_or_nan`` form vouches for it, the fallback's
    elsewhere; on concrete inputs the fallback's program is traced only where needed, under a user's ``jit`` one
    program holds both, and the method's own ``epsilon`` (the calibrators') is unchanged."""
    monkeypatch.setattr(_registry, "_METHODS", dict(_registry._METHODS))
    traced = []

    def fallback_epsilon(comp, direction, log_delta):
        traced.append("fallback")
        return _chernoff_epsilon(comp, direction, log_delta) + 1.0  # (recognisable: the toy's value plus one)

    def epsilon_or_nan(comp, direction, log_delta):  # cannot vouch below sigma ~1.4
        return jnp.where(comp.gaussian_mu2() > 0.5, jnp.nan, _chernoff_epsilon(comp, direction, log_delta))

    base = dict(certified=True, description="", log_delta=_chernoff_log_delta, supports=_gaussian_only)
    jaxdp.register_method(jaxdp.MethodInfo("toy-fallback", epsilon=fallback_epsilon, **base))
    estimate = jaxdp.with_fallback(
        jaxdp.MethodInfo("toy-estimate", epsilon=_chernoff_epsilon, **{**base, "certified": False}),
        fallback="toy-fallback",
        log_delta_or_nan=_chernoff_log_delta,
        epsilon_or_nan=epsilon_or_nan,
    )
    assert isinstance(estimate, jaxdp.MethodInfo) and estimate.fallback == "toy-fallback"
    jaxdp.register_method(estimate)
    with jax.enable_x64(True):
        own = {
            s: float(_chernoff_epsilon(jaxdp.Composition.of((jaxdp.Gaussian(s), 1)), "remove", jnp.log(1e-5)))
            for s in (2.0, 1.0)
        }
    eps = functools.partial(jaxdp.epsilon_for_delta, delta=1e-5, method="toy-estimate")
    assert float(eps(jaxdp.Gaussian(2.0))) == pytest.approx(own[2.0], rel=1e-12)
    assert traced == []  # (concrete inputs the estimate vouches for: the fallback is not even traced)
    assert float(eps(jaxdp.Gaussian(1.0))) == pytest.approx(own[1.0] + 1.0, rel=1e-12)
    assert traced == ["fallback"]
    user = jax.jit(lambda s: eps(jaxdp.Gaussian(s)))
    assert [float(user(s)) for s in (2.0, 1.0)] == pytest.approx([own[2.0], own[1.0] + 1.0], rel=1e-5)


def test_screened_computes_the_second_direction_only_where_the_screen_cannot_rule_it_out(monkeypatch):
    """``jaxdp.screened``: a later adjacency direction is computed only where the screen's bound exceeds the worse
    value found so far.  The toy's own add direction is a recognisable 100, which the answer holds only where the
    screen cannot show add below remove."""
    monkeypatch.setattr(_registry, "_METHODS", dict(_registry._METHODS))

    def constant(remove, add):
        return lambda comp, direction, arg: jnp.where(direction == "add", add, remove) + 0.0 * arg

    def register_screen(name, add):
        jaxdp.register_method(
            jaxdp.MethodInfo(
                name, certified=True, description="", log_delta=constant(0.0, 0.0), epsilon=constant(2.0, add)
            )
        )

    register_screen("toy-screen-low", add=0.5)  # rules add out: 0.5 <= the remove value found first
    register_screen("toy-screen-high", add=3.0)  # cannot
    mech = jaxdp.PoissonSubsampledGaussian(1.0, 0.01)  # (add-or-remove: two directions)
    for screen, want in (("toy-screen-low", 1.0), ("toy-screen-high", 100.0)):
        name = f"toy-screened-by-{screen}"
        jaxdp.register_method(
            jaxdp.screened(
                jaxdp.MethodInfo(
                    name, certified=True, description="", log_delta=constant(0.0, 0.0), epsilon=constant(1.0, 100.0)
                ),
                by=screen,
            )
        )
        assert float(jaxdp.epsilon_for_delta(mech, delta=1e-5, method=name)) == want
        user = jax.jit(lambda d, name=name: jaxdp.epsilon_for_delta(mech, delta=d, method=name))
        assert float(user(1e-5)) == want


# -- the direction as data ----------------------------------------------------------------------------------

_SEEN_DIRECTIONS: list = []


def _string_only_mechanism():
    """A third-party mechanism (a Poisson-subsampled Gaussian) written for string directions only."""
    from typing import ClassVar

    from jaxdp.numerics import pytree_dataclass

    def recorded(name):
        def method(self, t, direction="remove"):
            _SEEN_DIRECTIONS.append(direction)
            return getattr(jaxdp.PoissonSubsampledGaussian, name)(self, t, direction)

        method.__name__ = name
        return method

    namespace = {n: recorded(n) for n in ("cgf", "cgf_upper", "checked_moments", "tilted_abs_moment")}
    namespace["direction_as_data"] = False
    namespace["__annotations__"] = {"direction_as_data": ClassVar[bool]}
    cls = type("StringOnly", (jaxdp.PoissonSubsampledGaussian,), namespace)
    return pytree_dataclass(data=("noise_multiplier", "sampling_prob"), static=("adjacency",))(cls)


def test_a_mechanism_without_direction_as_data_gets_string_directions():
    """Built-in methods scan over a traced direction only where every mechanism says it accepts one; a
    third-party mechanism is called with "remove" and "add", and gives the built-in value."""
    mech = _string_only_mechanism()(0.8, 0.05)
    assert not mech.direction_as_data and jaxdp.PoissonSubsampledGaussian(0.8, 0.05).direction_as_data
    _SEEN_DIRECTIONS.clear()
    got = float(jaxdp.epsilon_for_delta(mech, delta=1e-6, num_steps=200, method="delta2"))
    assert all(isinstance(d, str) and d in ("remove", "add") for d in _SEEN_DIRECTIONS)
    assert {d == "add" for d in _SEEN_DIRECTIONS} == {True, False}  # both directions, one at a time
    builtin = jaxdp.PoissonSubsampledGaussian(0.8, 0.05)
    want = float(jaxdp.epsilon_for_delta(builtin, delta=1e-6, num_steps=200, method="delta2"))
    assert got == pytest.approx(want, rel=1e-9)


def _method_units():
    """The modules and packages of ``jaxdp.accountants`` that register methods (a module-level ``METHODS``)."""
    units = set()
    for path in (ROOT / "accountants").rglob("*.py"):
        tree = ast.parse(path.read_text())
        if any(
            isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "METHODS" for t in n.targets) for n in tree.body
        ):
            name = _module_name(path)
            # a method inside a subpackage of accountants is that whole subpackage
            units.add(".".join(name.split(".")[:3]))
    return units


def test_no_method_module_imports_another():
    """Method modules share machinery (``_cgf``, ``_bounds``, ``_staging``, ``_registry``), not one another; the
    table of built-ins (``_api``) is the only importer of them (issue 45)."""
    units = _method_units()
    assert {"jaxdp.accountants._rdp", "jaxdp.accountants._split_saddle", "jaxdp.accountants.certified"} <= units
    bad = []
    for path in _sources():
        me, imports = _imports(path)
        mine = [u for u in units if (me + ".").startswith(u + ".")]
        for line, target, _ in imports:
            theirs = [u for u in units if (target + ".").startswith(u + ".")]
            if theirs and mine and theirs != mine:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
            # outside the method modules, only the table of built-ins imports them
            if theirs and not mine and me != "jaxdp.accountants._api":
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target} (only _api may)")
    assert not bad, bad


def test_no_module_over_500_lines():
    """A room of one concept (the issue asked for about 500 lines at most, and checks 600: the tighter figure is
    kept so that the margin is not spent)."""
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in _sources()}
    assert not {k: v for k, v in sizes.items() if v > 500}


def test_no_import_cycle():
    """No cycle among the modules' top-level imports (a ``TYPE_CHECKING`` block aside): each module can be
    imported first."""
    graph = {}
    for path in _sources():
        me, imports = _imports(path, top_level=True)
        graph[me] = {target for _, target, _ in imports}
    graph = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = "open"
        for d in sorted(graph[m]):
            if state.get(d) == "open":
                cycles.append([*stack[stack.index(d) :], d])
            elif d not in state:
                visit(d, [*stack, d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles


def test_internals_stay_out_of_the_public_surface():
    """What the packages share among themselves lives in their ``internal`` modules (as ``equinox.internal``), and
    none of it is in a package's ``__all__`` or the top-level ``jaxdp`` namespace."""
    import importlib

    for package in ("jaxdp.mechanisms", "jaxdp.accountants"):
        public = set(importlib.import_module(package).__all__)
        internal = set(importlib.import_module(package + ".internal").__all__)
        assert not internal & public, (package, sorted(internal & public))
        assert not internal & set(jaxdp._EXPORTS), (package, sorted(internal & set(jaxdp._EXPORTS)))
