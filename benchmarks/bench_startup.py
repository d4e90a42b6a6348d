"""Time to the first answer in a fresh process (issue: accountants inside users' compiled code, item 3).

    python benchmarks/bench_startup.py [--out benchmarks/results/startup.md] [--repeats 1]

Every row is a fresh Python process with JAX's persistent compilation cache off (import
included), as a new user meets the library:

* jaxdp ``epsilon_for_delta`` for ``certified``, ``characteristic``, ``saddlepoint`` and ``rdp``
  (PoissonSubsampledGaussian(1.1, 0.01), 1000 steps, delta = 1e-5), with the time split into
  import, Python tracing, lowering and XLA compilation (from ``jax.jit(...).trace/.lower/.compile``),
* the first calibration (``calibrate_noise_multiplier``, its defaults),
* the command line ``jaxdp epsilon`` (certified) cold and with a warm persistent cache,
* dp_accounting's PLD and RDP accountants on the same question, cold (the peers' start-up).

The targets of the issue are printed beside the measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SETTING = {"sigma": 1.1, "q": 0.01, "steps": 1000, "delta": 1e-5}

JAXDP_PHASES = r"""
import json, sys, time
t0 = time.perf_counter()
import jax, jax.numpy as jnp
import jaxdp
from jaxdp.accountants._api import epsilon_of_composition
from jaxdp.mechanisms import as_composition
from jaxdp.numerics import to_f64
t_import = time.perf_counter() - t0
method, s = sys.argv[1], json.loads(sys.argv[2])
with jax.enable_x64(True):
    comp = to_f64(as_composition(jaxdp.PoissonSubsampledGaussian(s["sigma"], s["q"]), s["steps"]))
    d = jnp.float64(s["delta"])
    f = jax.jit(epsilon_of_composition, static_argnames=("method",))
    t = time.perf_counter(); traced = f.trace(comp, d, method=method); t_trace = time.perf_counter() - t
    t = time.perf_counter(); lowered = traced.lower(); t_lower = time.perf_counter() - t
    t = time.perf_counter(); compiled = lowered.compile(); t_compile = time.perf_counter() - t
    t = time.perf_counter(); eps = float(compiled(comp, d)); t_run = time.perf_counter() - t
print(json.dumps({"import": t_import, "trace": t_trace, "lower": t_lower, "compile": t_compile, "run": t_run,
                  "total": time.perf_counter() - t0, "epsilon": eps}))
"""

JAXDP_PUBLIC = r"""
import json, sys, time
t0 = time.perf_counter()
import jaxdp
method, s = sys.argv[1], json.loads(sys.argv[2])
m = jaxdp.PoissonSubsampledGaussian(s["sigma"], s["q"])
if method == "calibrate":
    r = jaxdp.calibrate_noise_multiplier(target_epsilon=8.0, delta=s["delta"], sampling_prob=s["q"],
                                         num_steps=s["steps"])
    value = float(r.noise_multiplier)
else:
    value = float(jaxdp.epsilon_for_delta(m, num_steps=s["steps"], delta=s["delta"], method=method))
print(json.dumps({"total": time.perf_counter() - t0, "value": value}))
"""

PEER = r"""
import json, sys, time
t0 = time.perf_counter()
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
kind, s = sys.argv[1], json.loads(sys.argv[2])
acc = (pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4) if kind == "pld"
       else rdp_privacy_accountant.RdpAccountant())
acc.compose(dp_event.PoissonSampledDpEvent(s["q"], dp_event.GaussianDpEvent(s["sigma"])), s["steps"])
value = acc.get_epsilon(s["delta"])
print(json.dumps({"total": time.perf_counter() - t0, "value": value}))
"""

TARGETS = {"certified": 6.0, "characteristic": 4.0, "calibrate": 10.0, "cli-warm": 2.0}


def _env(cache_dir=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env.pop("JAX_ENABLE_X64", None)
    env["JAX_PLATFORMS"] = "cpu"
    if cache_dir is None:
        env["JAXDP_CACHE_DIR"] = "off"  # the command line's own cache; the library sets none
    else:
        env["JAXDP_CACHE_DIR"] = cache_dir
    return env


def _python(script, *args, env):
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["wall"] = wall
    return res


def _cli(env):
    argv = [
        sys.executable,
        "-m",
        "jaxdp",
        "epsilon",
        "--sigma",
        str(SETTING["sigma"]),
        "--q",
        str(SETTING["q"]),
        "--steps",
        str(SETTING["steps"]),
        "--delta",
        str(SETTING["delta"]),
        "--json",
    ]
    t = time.perf_counter()
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - t, json.loads(out.stdout)["epsilon"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--methods", default="certified,characteristic,saddlepoint,rdp")
    args = ap.parse_args(argv)
    setting = json.dumps(SETTING)
    lines = [
        "# Time to the first answer (fresh process, persistent cache off, import included)",
        "",
        f"Setting: PoissonSubsampledGaussian(sigma={SETTING['sigma']}, q={SETTING['q']}), "
        f"{SETTING['steps']} steps, delta={SETTING['delta']}; CPU cores: {os.cpu_count()}.",
        "",
        "| what | first answer (s) | import | trace | lower | XLA compile | run | target | value |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = {}
    for method in args.methods.split(","):
        ph = _python(JAXDP_PHASES, method, setting, env=_env())
        pub = _python(JAXDP_PUBLIC, method, setting, env=_env())
        rows[method] = pub["wall"]
        target = f"<= {TARGETS[method]:g}" if method in TARGETS else ""
        lines.append(
            f"| jaxdp `{method}` | {pub['wall']:.1f} | {ph['import']:.1f} | {ph['trace']:.1f} | {ph['lower']:.1f} | "
            f"{ph['compile']:.1f} | {ph['run']:.3f} | {target} | {pub['value']:.6f} |"
        )
        print(lines[-1], flush=True)
    cal = _python(JAXDP_PUBLIC, "calibrate", setting, env=_env())
    lines.append(
        f"| jaxdp first calibration (sigma for eps = 8) | {cal['wall']:.1f} | | | | | | <= 10 | {cal['value']:.6f} |"
    )
    print(lines[-1], flush=True)
    with tempfile.TemporaryDirectory() as cache:
        cold, _ = _cli(_env(cache))
        warm, value = _cli(_env(cache))
    lines.append(f"| `jaxdp epsilon` (certified), empty persistent cache | {cold:.1f} | | | | | | | {value:.6f} |")
    lines.append(f"| `jaxdp epsilon` (certified), warm persistent cache | {warm:.1f} | | | | | | <= 2 | {value:.6f} |")
    print("\n".join(lines[-2:]), flush=True)
    for kind in ("pld", "rdp"):
        peer = _python(PEER, kind, setting, env=_env())
        lines.append(f"| dp_accounting {kind.upper()} (cold) | {peer['wall']:.1f} | | | | | | | {peer['value']:.6f} |")
        print(lines[-1], flush=True)
        rows[f"dp_accounting {kind}"] = peer["wall"]
    if "certified" in rows:
        ratio = rows["certified"] / rows["dp_accounting pld"]
        lines += ["", f"jaxdp certified / dp_accounting PLD, first answer: {ratio:.1f}x"]
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    print(text)


if __name__ == "__main__":
    main()
