"""Results are float64 whatever the user's ``jax_enable_x64`` setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, jax, jaxdp
m = jaxdp.PoissonSubsampledGaussian(1.1, 0.0042667)
e = jaxdp.epsilon_for_delta(m, num_steps=14040, delta=1e-5, method="rdp")
d = jaxdp.log_delta_for_epsilon(jaxdp.Gaussian(1.0), epsilon=40.0, method="exact")
j = jax.jit(lambda s: jaxdp.epsilon_for_delta(jaxdp.Gaussian(s), delta=1e-12, method="exact"))(2.0)
# traced with x64 off the result is in the user's dtype (float32, rounded upwards); with x64 on, float64
print(json.dumps({"x64": bool(jax.config.jax_enable_x64), "eps": float(e), "eps_dtype": str(e.dtype),
                  "logd": float(d), "jit": float(j), "jit_dtype": str(j.dtype)}))
"""


def _run(flag):
    env = dict(os.environ, JAX_ENABLE_X64=flag, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_float64_regardless_of_x64_flag_and_the_same_numbers():
    # (one child process per setting of the flag, both checks on their answers)
    runs = {flag: _run(flag) for flag in ("0", "1")}
    for flag, got in runs.items():
        assert got["x64"] == (flag == "1")
        assert got["eps_dtype"] == "float64"
        assert got["jit_dtype"] == ("float64" if flag == "1" else "float32")
        assert got["logd"] < -700  # delta ~ 1e-340: representable only through the log
    a, b = runs["0"], runs["1"]
    for key in ["eps", "logd"]:
        assert a[key] == pytest.approx(b[key], rel=1e-13)
    # the x64-off trace returns float32 rounded up: at or above the float64 value, within one float32 ulp
    assert b["jit"] <= a["jit"] <= b["jit"] * (1 + 2**-23)
