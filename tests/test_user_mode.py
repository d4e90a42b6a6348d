"""The public entry points inside users' own transformations, with JAX's default x64 off.

Each case runs in a fresh subprocess with ``JAX_ENABLE_X64`` unset (JAX's default, as a
Flax/optax user runs), under every transformation a user applies: ``jit``, ``vmap``,
``grad``, ``jit(vmap)``, ``jit(grad)``, ``vmap(grad)``, and the already-traced orders
``vmap(jit)`` and ``grad(jit)``.  The reference is a second subprocess with x64 on,
evaluated eagerly at the same (float32-rounded) inputs, with central differences in float64
for the gradients -- an independent check of the boundary's Jacobian.

Traced with x64 off, a result comes back as float32 rounded in the safe direction (an
epsilon or delta upwards), so values agree to float32 rounding and bounds stay bounds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from _helpers import QUICK_CPU_FLAG

SIGMAS = [1.1, 1.3]
QS = [0.01, 0.02]
STEPS = 1000
DELTA = 1e-5
EPSILON = 2.0

# the compile time of the heavy accountants is ~30-60 s per program on two cores: the default run
# covers a cross-section, the whole matrix runs under -m slow
CHEAP = ("rdp", "saddlepoint", "exact")
ALL_TRANSFORMS = ("jit", "vmap", "grad", "jit_vmap", "jit_grad", "vmap_grad", "vmap_jit", "grad_jit")

USER_SCRIPT = r"""
import json, sys
import jax, jax.numpy as jnp
import jaxdp

case = json.loads(sys.argv[1])
assert not jax.config.jax_enable_x64
kind, method, transforms = case["kind"], case["method"], case["transforms"]

def _mechanism(s, q):  # (no arithmetic on the user's float32 inputs before they reach jaxdp)
    if method == "exact":  # Gaussian: q only enters through a second, plain Gaussian
        return jaxdp.Composition.of((jaxdp.Gaussian(s), 5), (jaxdp.Gaussian(q), 1)), case["steps"] // 1000
    return jaxdp.PoissonSubsampledGaussian(s, q), case["steps"]

def f(s, q):
    if kind == "epsilon":
        m, n = _mechanism(s, q)
        return jaxdp.epsilon_for_delta(m, num_steps=n, delta=case["delta"], method=method)
    if kind == "delta":
        m, n = _mechanism(s, q)
        return jaxdp.log_delta_for_epsilon(m, num_steps=n, epsilon=case["epsilon"], method=method)
    if kind == "renyi":
        return jaxdp.renyi_dp(jaxdp.PoissonSubsampledGaussian(s, q), orders=8.0, num_steps=case["steps"])
    if kind == "calibrate_sigma":
        r = jaxdp.calibrate_noise_multiplier(target_epsilon=s, delta=case["delta"], sampling_prob=q,
                                             num_steps=case["steps"], method=method, certify=case["certify"])
        return r.noise_multiplier
    if kind == "calibrate_q":
        r = jaxdp.calibrate_sampling_prob(target_epsilon=s, delta=case["delta"], noise_multiplier=q,
                                          num_steps=case["steps"], method=method, certify=case["certify"])
        return r.sampling_prob
    if kind == "calibrate_steps":
        r = jaxdp.calibrate_num_steps(target_epsilon=s, delta=case["delta"], noise_multiplier=q,
                                      sampling_prob=0.01, max_steps=100_000, method=method, certify=case["certify"])
        return r.num_steps
    raise ValueError(kind)

s0, q0 = jnp.float32(case["s"][0]), jnp.float32(case["q"][0])
S, Q = jnp.asarray(case["s"], jnp.float32), jnp.asarray(case["q"], jnp.float32)
runs = {
    "jit": lambda: jax.jit(f)(s0, q0),
    "vmap": lambda: jax.vmap(f)(S, Q),
    "grad": lambda: jnp.stack(jax.grad(f, argnums=(0, 1))(s0, q0)),
    "jit_vmap": lambda: jax.jit(jax.vmap(f))(S, Q),
    "jit_grad": lambda: jnp.stack(jax.jit(jax.grad(f, argnums=(0, 1)))(s0, q0)),
    "vmap_grad": lambda: jnp.stack(jax.vmap(jax.grad(f, argnums=(0, 1)))(S, Q), axis=-1),
    "vmap_jit": lambda: jax.vmap(jax.jit(f))(S, Q),
    "grad_jit": lambda: jnp.stack(jax.grad(jax.jit(f), argnums=(0, 1))(s0, q0)),
}
out = {}
for name in transforms:
    try:
        r = runs[name]()
        out[name] = {"value": jnp.asarray(r).tolist(), "dtype": str(jnp.asarray(r).dtype)}
    except Exception as e:  # reported, and the test fails naming the cell
        out[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
print(json.dumps(out))
"""

REFERENCE_SCRIPT = USER_SCRIPT.replace("assert not jax.config.jax_enable_x64", "assert jax.config.jax_enable_x64")
REFERENCE_SCRIPT = (
    REFERENCE_SCRIPT[: REFERENCE_SCRIPT.index("s0, q0 =")]
    + r"""
import numpy as np
f32 = lambda v: float(np.float32(v))  # the inputs the float32 user passes
vals, grads = [], []
want_grads = any("grad" in name for name in transforms)  # (a gradient reference is a program of its own)
# only what the user's cells are compared with: values where a cell is not a gradient, gradients where one is;
# at every point under a vmap, else at the first (a reference point of a calibrator is a calibration, and five for
# its central differences)
value_points = 0 if all("grad" in name for name in transforms) else len(case["s"])
if not any("vmap" in name for name in transforms if "grad" not in name):
    value_points = min(value_points, 1)
grad_points = len(case["s"]) if "vmap_grad" in transforms else int(want_grads)
for i, (s, q) in enumerate(zip(case["s"], case["q"])):
    s, q = f32(s), f32(q)
    if i < value_points:
        vals.append(float(f(jnp.float64(s), jnp.float64(q))))
    if i >= grad_points:
        continue
    if case["grad_reference"] == "autodiff":  # a lattice bound: compare with x64-on jax.grad
        g = [float(v) for v in jax.grad(f, argnums=(0, 1))(jnp.float64(s), jnp.float64(q))]
    else:  # central differences in float64
        g = []
        for hs, hq in [(1e-6 * s, 0.0), (0.0, 1e-6 * q)]:
            h = hs + hq
            g.append((float(f(jnp.float64(s + hs), jnp.float64(q + hq)))
                      - float(f(jnp.float64(s - hs), jnp.float64(q - hq)))) / (2 * h))
    grads.append(g)
print(json.dumps({"values": vals, "grads": grads}))
"""
)


def _subprocess(script, case, x64):
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    env["JAX_PLATFORMS"] = "cpu"
    if x64:
        env["JAX_ENABLE_X64"] = "1"
    else:
        # (the user's side compiles with XLA's defaults, as users do; the reference with the suite's code generation)
        env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split() if f != QUICK_CPU_FLAG)
    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(case)], env=env, capture_output=True, text=True, timeout=1800
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _record(case, got, values, grads):
    """One JSON line per cell to ``$JAXDP_MATRIX_LOG`` when it is set (``benchmarks/user_mode_matrix.py`` tables
    them): the x64-off value, the x64-on reference and their largest relative difference."""
    path = os.environ.get("JAXDP_MATRIX_LOG")
    if not path:
        return
    import jax

    with open(path, "a") as fh:
        for name, cell in got.items():
            row = {"jax": jax.__version__, "kind": case["kind"], "method": case["method"], "transform": name}
            if "error" in cell:
                row["error"] = cell["error"]
            else:
                value = np.array(cell["value"])
                want = (
                    (grads if name == "vmap_grad" else grads[0])
                    if "grad" in name
                    else (values if value.ndim else values[0])
                )
                want = np.asarray(want, np.float64)
                rel = np.max(np.abs(value - want) / np.maximum(np.abs(want), 1e-6)) if want.size else float("nan")
                row.update(value=np.ravel(value).tolist(), want=np.ravel(want).tolist(), rel=float(rel))
            fh.write(json.dumps(row) + "\n")


def _check(case, rtol_value=2e-6, rtol_grad=2e-4):
    got = _subprocess(USER_SCRIPT, case, x64=False)
    ref = _subprocess(REFERENCE_SCRIPT, case, x64=True)
    values, grads = np.array(ref["values"]), np.array(ref["grads"])
    _record(case, got, values, grads)
    failures = {k: v["error"] for k, v in got.items() if "error" in v}
    assert not failures, failures
    for name, cell in got.items():
        assert cell["dtype"] == "float32", (name, cell)
        value = np.array(cell["value"])
        if "grad" in name:
            want = grads if name == "vmap_grad" else grads[0]
            np.testing.assert_allclose(value, want, rtol=rtol_grad, atol=1e-6, err_msg=name)
        else:
            want = values if value.ndim else values[0]
            np.testing.assert_allclose(value, want, rtol=rtol_value, err_msg=name)
            if case["kind"] in ("epsilon", "delta", "renyi"):  # upper bounds round upwards
                assert np.all(value >= want - 1e-12 * np.abs(want)), (name, value, want)


def _case(kind, method, transforms=ALL_TRANSFORMS, **kw):
    return {
        "kind": kind,
        "method": method,
        "transforms": list(transforms),
        "s": SIGMAS,
        "q": QS,
        "steps": STEPS,
        "delta": DELTA,
        "epsilon": EPSILON,
        "certify": None,
        # x64-on autodiff for a lattice bound, and for the real-axis baseline: its value carries quadrature noise of
        # ~1e-5 relative at delta ~1e-7 (the tails' truncation moves with sigma), so central differences with a
        # 1e-6 step measured -17.7 for d log delta / d sigma at sigma 1.1, q 0.01, eps 2 where its autodiff, -37.02,
        # is right: the contour method's -37.25 and the saddle point's -37.18 (both smooth to 1e-9) agree with it
        # to its value's 0.6 % (test_characteristic.py::test_real_axis_gradient_is_that_of_an_accurate_method)
        "grad_reference": "autodiff"
        if method.startswith("certified") or method == "gil-pelaez"
        else "finite_differences",
        **kw,
    }


# the default run: every transformation for one cheap method, a cross-section for the rest
DEFAULT_CELLS = {
    # an epsilon solve under jit and jit(grad) on the one-Gaussian delta_2 estimate (programs of seconds); the split
    # estimate under every transformation: test_cheap_accountants_under_every_transformation (-m slow: its
    # programs are the suite's costliest), its x64-off jit in test_training.py's jitted train step
    ("epsilon", "delta2"): ("jit", "jit_grad"),  # (under -m slow: tests/conftest.py says why)
    ("delta", "rdp"): ("jit_grad",),
    ("epsilon", "exact"): ("jit",),
    ("delta", "exact"): ("jit_grad",),
}


@pytest.mark.parametrize(("kind", "method"), list(DEFAULT_CELLS))
def test_cheap_accountants_under_user_transformations(kind, method):
    extra = {"q": [3.0, 4.0]} if method == "exact" else {}
    _check(_case(kind, method, transforms=DEFAULT_CELLS[(kind, method)], **extra))


@pytest.mark.slow
@pytest.mark.parametrize("method", CHEAP)
@pytest.mark.parametrize("kind", ["epsilon", "delta"])
def test_cheap_accountants_under_every_transformation(kind, method):
    _check(_case(kind, method, **({"q": [3.0, 4.0]} if method == "exact" else {})))


def test_renyi_dp_under_user_transformations():
    _check(_case("renyi", "rdp", transforms=("jit", "vmap_grad")))


@pytest.mark.slow
def test_renyi_dp_under_every_transformation():
    _check(_case("renyi", "rdp"))


# several cases in one user process (one start of Python and JAX instead of one each)
MANY_SCRIPT = r"""
import contextlib, io, json, sys
outs = []
for case in json.loads(sys.argv[1]):
    sys.argv[1] = json.dumps(case)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(USER_SCRIPT, "<user>", "exec"), {"__name__": "__main__"})
    outs.append(json.loads(buf.getvalue().strip().splitlines()[-1]))
print(json.dumps(outs))
""".replace("USER_SCRIPT", repr(USER_SCRIPT))

HEAVY = ("certified", "certified-fast", "characteristic")


# the default method in the default run (each heavy program is ~30 s of compile in the child); the others: -m slow
@pytest.mark.parametrize(
    "methods", [HEAVY[:1], pytest.param(HEAVY[1:], marks=pytest.mark.slow)], ids=["default", "others"]
)
def test_heavy_accountants_under_a_users_jit(methods):
    """The heavy accountants inside a user's ``jit`` with x64 off, in the cheapest form that shows it: log delta
    (its compile is ~60 % of the epsilon solve's), equal to float32 rounding to the float64 eager call at the same
    float32 inputs (made here: an eager call with concrete inputs runs in float64 whatever the x64 flag), and
    rounded upwards.  Every other transformation of these: -m slow (below)."""
    import jaxdp

    cases = [_case("delta", method, transforms=("jit",), s=SIGMAS[:1], q=QS[:1]) for method in methods]
    got = _subprocess(MANY_SCRIPT, cases, x64=False)
    s, q = (float(np.float32(v[0])) for v in (SIGMAS, QS))
    for method, cell in zip(methods, got):
        assert "error" not in cell["jit"], (method, cell)
        value = cell["jit"]["value"]
        assert cell["jit"]["dtype"] == "float32", (method, cell)
        m = jaxdp.PoissonSubsampledGaussian(s, q)
        want = float(jaxdp.log_delta_for_epsilon(m, epsilon=EPSILON, num_steps=STEPS, method=method))
        assert value == pytest.approx(want, rel=2e-6), method
        assert value >= want, method  # an epsilon or a delta rounds upwards (a bound stays a bound)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["characteristic", "certified-fast"])
def test_heavy_accountants_under_jit_of_grad(method):
    _check(_case("epsilon", method, transforms=("jit_grad",)))


@pytest.mark.slow
@pytest.mark.parametrize(
    "method", ["characteristic", "gil-pelaez", "certified", "certified-fast", "delta2-certified"]
)
@pytest.mark.parametrize("kind", ["epsilon", "delta"])
def test_heavy_accountants_under_every_transformation(kind, method):
    _check(_case(kind, method))


def _calibration_case(kind, method, **kw):
    # s is the target epsilon; q the sampling rate (noise calibration) or the noise multiplier
    q = QS if kind == "calibrate_sigma" else [1.5, 2.0]
    return _case(kind, method, s=[2.0, 3.0], q=q, **kw)


# the calibrators' machinery on the cheapest estimate (delta_2) in the default run; on the split estimate (each
# compile ~2.5 min on two cores) with -m slow
@pytest.mark.parametrize(
    ("kind", "method"),
    [
        ("calibrate_sigma", "delta2"),
        pytest.param("calibrate_sigma", "saddlepoint", marks=pytest.mark.slow),
        pytest.param("calibrate_q", "saddlepoint", marks=pytest.mark.slow),
    ],
)
def test_calibrators_under_jit_and_grad(kind, method):
    case = _calibration_case(kind, method, transforms=("jit_grad",))
    _check(case, rtol_value=5e-6, rtol_grad=2e-3)


@pytest.mark.slow
def test_calibrate_num_steps_under_jit_and_vmap():  # a whole number: no derivative
    _check(_calibration_case("calibrate_steps", "saddlepoint", transforms=("jit",)), rtol_value=0)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["calibrate_sigma", "calibrate_q"])
def test_calibrators_with_defaults_under_every_transformation(kind):
    case = _calibration_case(kind, "characteristic", certify="certified-fast")
    _check(case, rtol_value=5e-6, rtol_grad=2e-3)


@pytest.mark.parametrize(
    "x",
    [
        [3.0, 1.0, 3.0, -2.0],  # ties: the first
        [1.0, np.nan, 5.0, np.nan],  # NaN counts as the extreme, the first one
        [-np.inf, -np.inf],
        [True, False, True],
        [[1.0, 7.0, 7.0], [9.0, 2.0, 9.0]],
    ],
)
def test_argmax_argmin_match_numpy(x):
    from jaxdp.numerics import argmax, argmin

    x = np.asarray(x)
    for axis in range(x.ndim):
        np.testing.assert_array_equal(argmax(x, axis=axis), np.argmax(x, axis=axis))
        np.testing.assert_array_equal(argmin(x, axis=axis), np.argmin(x, axis=axis))
