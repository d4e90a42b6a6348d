"""One-shot GPU benchmark: Monte Carlo throughput and vectorised epsilon sweeps, against the 2-core CPU figures.

    PYTHONPATH=. python3 benchmarks/bench_gpu.py --out $OUT/gpu.md [--commit abc1234] [--budget-s 280]
    PYTHONPATH=. python3 benchmarks/bench_gpu.py --quick --out /tmp/gpu_quick.md   # smoke run, tiny sizes

Made for a rented GPU with a few minutes of device time: needs only jax and numpy (no scipy, no peers), runs
the items below in order, and rewrites the markdown report (and its raw numbers, same name with ``.json``) after
every measurement, so a run cut short still leaves what it measured.  A measurement whose predicted cost no longer
fits the time budget (``--budget-s``, measured from the start of the script) is skipped and marked so; a watchdog
writes the report and exits at ``--hard-s`` whatever is running then.  Every measurement is guarded: an exception
becomes a table row (its text) and the run goes on.

1. Monte Carlo throughput (``benchmarks/bench_montecarlo.py`` section 5): ``montecarlo_delta`` of PSG sigma 1,
   q 0.01, eps 2, 1000 steps, adjacency ``remove``, estimators simple / tilted / tilted-one, 1e6 / 1e7 / 1e8
   samples; sampled steps per second of the second call (the first compiles), against the CPU figures.
2. The delta ~ 7e-10 case of section 2 (sigma 1, q 0.01, 2000 steps, eps 4, ``remove``, tilted): relative
   standard error and seconds with 1e6 and 1e8 samples.
3. ``jax.jit(jax.vmap(epsilon_for_delta))`` over the issue's random grid (``bench_saddlepoint.py``
   ``_issue_targets``: 10,000 configurations, seed 0) for ``saddlepoint`` and ``delta2``, 1,000 and
   10,000 at once; compile time apart; non-finite results counted.
4. One epsilon query (sigma 1, q 1e-3, 1e4 steps, delta 1e-6) under ``jax.jit``: median of 20 calls.
5. Item 3 for ``characteristic`` (last of the sweeps: its vmapped program also runs its certified fallback).
6. ``calibrate_noise_multiplier`` over 1,000 targets in one vectorised call (its defaults: characteristic,
   certified-fast check).
7. Agreement of the device's sweep results with the host CPU backend's on the first configurations.

``--only mc,tiny,...`` runs some items (names in ``ITEMS``); ``--quick`` defaults the budget to 150 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # runs from a checkout without installing jaxdp
sys.path.insert(0, HERE)

from _timing import once  # noqa: E402

import jaxdp  # noqa: E402

PSG = jaxdp.PoissonSubsampledGaussian
ESTIMATORS = ("simple", "tilted", "tilted-one")
SWEEP_METHODS = ("saddlepoint", "delta2", "characteristic")

# The 2-core CPU figures these are compared with (benchmarks/results/montecarlo.md section 5, re-run on an idle
# machine; benchmarks/results/saddlepoint.md "The issue's targets", where 10,000 ran as lax.map(batch_size=1000)).
CPU_MC_RATE = {"simple": 2.34e7, "tilted": 2.26e7, "tilted-one": 1.82e7}
CPU_NAIVE_RATE = 1.20e7  # jax.jit(lambda k: m.sample_privacy_loss(k, (2**16, 1000)).sum(1)), x64
CPU_TINY = {"samples": 1_000_000, "seconds": 130.9, "rel_stderr": 0.0039}  # seconds include compilation
CPU_SWEEP_S = {("saddlepoint", 1000): 10.94, ("saddlepoint", 10_000): 97.15}
CPU_SWEEP_S.update({("delta2", 1000): 0.58, ("delta2", 10_000): 6.50})
CPU_QUERY_MS = {"saddlepoint": 4.55, "delta2": 0.99}
TARGET_MC_RATE, TARGET_SWEEP_S, TARGET_QUERY_MS = 2e7, 3.0, 2.0

# The tiny-delta row: tests/reference_values.py case psg_1.0_0.01_2000 at eps = 4 (add_or_remove delta; the
# remove direction dominates, see benchmarks/results/montecarlo.md section 2).
TINY = dict(sigma=1.0, q=0.01, steps=2000, epsilon=4.0, reference=7.331773e-10)

# When each item should be done by, as a fraction of the budget (a later item gets what an earlier one left).
SCHEDULE = {
    "mc": 0.22,
    "tiny": 0.32,
    "sweep": 0.60,
    "query": 0.67,
    "characteristic": 0.85,
    "calibrate": 0.96,
    "agree": 1.0,
}


def sizes(quick):
    if quick:
        return dict(
            mc_steps=100,
            mc_samples=[4096, 16_384],
            naive_samples=[4096],
            tiny_samples=[4096, 8192],
            sweep_n=[10, 40],
            query_calls=5,
            calib_n=4,
            agree_n=8,
        )
    return dict(
        mc_steps=1000,
        mc_samples=[1_000_000, 10_000_000, 100_000_000],
        naive_samples=[2**16, 2**20],
        tiny_samples=[1_000_000, 100_000_000],
        sweep_n=[1000, 10_000],
        query_calls=20,
        calib_n=1000,
        agree_n=64,
    )


# -- report ------------------------------------------------------------------------------------------------------


def _cell(x):
    return str(x).replace("|", "\\|").replace("\n", " ")


def _err(e):
    lines = [s.strip() for s in str(e).splitlines() if s.strip()]
    return f"{type(e).__name__}: {lines[0][:240] if lines else ''}"


def _json_default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def fmt_s(x):
    return "—" if x is None else f"{x:.3f}" if x < 10 else f"{x:.1f}"


def fmt_per(x):
    return f"{1e6 * x:.1f} us" if x < 1e-3 else f"{1e3 * x:.2f} ms" if x < 1 else f"{x:.2f} s"


def fmt_ratio(x):
    return "—" if x is None or not math.isfinite(x) else f"{x:,.1f}x" if x < 1000 else f"{x:,.0f}x"


@dataclasses.dataclass
class Section:
    key: str
    title: str
    intro: list[str]
    columns: list[str]
    labels: int  # how many leading columns name the row
    deadline: float  # seconds after the start by which its measurements should be done
    rows: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    raw: list = dataclasses.field(default_factory=list)
    seconds: float | None = None


class Bench:
    def __init__(self, args, S):
        self.args, self.S = args, S
        self.t0 = time.perf_counter()
        self.budget = args.budget_s
        self.md = args.out
        self.json = os.path.splitext(args.out)[0] + ".json"
        self.sections: list[Section] = []
        self.summary: list[tuple] = []  # (what, target, cpu, device, ratio)
        self.head: list[str] = []
        self.record: dict = {}
        self.footer: list[str] = []
        self.current = "start"
        self.lock = threading.Lock()
        self.outputs: dict = {}  # sweep results kept for the agreement check

    # time
    def elapsed(self):
        return time.perf_counter() - self.t0

    def left(self):
        return self.budget - self.elapsed()

    def log(self, msg):
        now = datetime.datetime.now().strftime("%H:%M:%S")
        print(f"[{now} +{self.elapsed():6.1f}s] {msg}", flush=True)

    # report
    def section(self, key, title, intro, columns, labels=1):
        sec = Section(key, title, intro, columns, labels, SCHEDULE[key] * self.budget)
        self.sections.append(sec)
        return sec

    def render(self):
        out = list(self.head)
        if self.summary:
            out += [
                "## Summary",
                "",
                "| what | target | CPU (2 cores) | this device | ratio |",
                "|---|---|---|---|---|",
            ]
            out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in self.summary]
            out.append("")
        for sec in self.sections:
            out += [f"## {sec.title}", ""] + sec.intro + ([""] if sec.intro else [])
            out += ["| " + " | ".join(sec.columns) + " |", "|" + "---|" * len(sec.columns)]
            out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in sec.rows]
            out.append("")
            notes = sec.notes + ([f"Section wall time: {sec.seconds:.1f} s."] if sec.seconds is not None else [])
            out += [f"* {n}" for n in notes] + ([""] if notes else [])
        out += self.footer
        return "\n".join(out).rstrip("\n") + "\n"

    def write(self):
        with self.lock:
            self.record["elapsed_s"] = self.elapsed()
            self.record["summary"] = self.summary
            self.record["sections"] = {s.key: dict(title=s.title, raw=s.raw, seconds=s.seconds) for s in self.sections}
            for path, text in [
                (self.md, self.render()),
                (self.json, json.dumps(self.record, indent=1, default=_json_default)),
            ]:
                tmp = path + ".tmp"
                with open(tmp, "w") as fh:
                    fh.write(text)
                os.replace(tmp, path)

    # measurements
    def measure(self, sec, labels, fn, predicted=None):
        """Runs ``fn() -> (cells, raw)`` (``raw``: a dict) unless the budget says no; the row goes into ``sec``
        either way (an exception's text, or why it was skipped).  Returns ``raw`` or None."""
        labels = [str(x) for x in labels]
        pad = len(sec.columns) - len(labels) - 1
        left = min(self.left(), sec.deadline - self.elapsed())
        why = None
        if self.left() <= 0:
            why = f"skipped: time budget ({self.elapsed():.0f} s of {self.budget:.0f} s used)"
        elif predicted is not None and math.isinf(predicted):
            why = "skipped: the smaller size was skipped or failed"
        elif predicted is not None and predicted > left:
            why = f"skipped: time budget (predicted {predicted:.0f} s, {max(left, 0):.0f} s left for this item)"
        if why:
            self.log(f"{sec.key}: {' / '.join(labels)}: {why}")
            sec.rows.append(labels + [why] + [""] * pad)
            sec.raw.append(dict(labels=labels, skipped=why, predicted_s=predicted))
            self.write()
            return None
        self.current = f"{sec.title}: {' / '.join(labels)}"
        self.log(f"{sec.key}: {' / '.join(labels)} ..." + (f" (predicted {predicted:.0f} s)" if predicted else ""))
        t0 = time.perf_counter()
        try:
            cells, raw = fn()
        except Exception as e:  # recorded in the table; the run goes on
            traceback.print_exc(file=sys.stdout)
            sys.stdout.flush()
            why = "error: " + _err(e)
            sec.rows.append(labels + [why] + [""] * pad)
            sec.raw.append(dict(labels=labels, error=why, traceback=traceback.format_exc(), seconds=self.since(t0)))
            self.log(f"{sec.key}: {' / '.join(labels)}: {why}")
            self.write()
            return None
        raw = dict(labels=labels, **raw, wall_s=self.since(t0))
        sec.rows.append(labels + [str(c) for c in cells])
        sec.raw.append(raw)
        self.log(f"{sec.key}: {' / '.join(labels)}: " + ", ".join(str(c) for c in cells))
        self.write()
        return raw

    @staticmethod
    def since(t0):
        return time.perf_counter() - t0

    def item(self, sec, fn):
        """Runs a whole item; an exception outside ``measure`` becomes a note."""
        t0 = time.perf_counter()
        try:
            fn(self, sec)
        except Exception as e:
            traceback.print_exc(file=sys.stdout)
            sec.notes.append(f"**Item failed:** {_cell(_err(e))}")
        sec.seconds = self.since(t0)
        peak = device_peak_bytes()
        if peak is not None:
            sec.notes.append(f"Peak device memory so far: {peak / 2**30:.2f} GiB.")
        self.write()

    def watchdog(self, hard_s):
        def stop():
            self.footer.append(
                f"**Stopped by the watchdog at {hard_s:.0f} s (`--hard-s`) while running: {_cell(self.current)}.**"
            )
            self.log(f"watchdog: {hard_s:.0f} s reached while running {self.current}; writing and exiting")
            self.write()
            sys.stdout.flush()
            os._exit(3)

        timer = threading.Timer(max(hard_s - self.elapsed(), 0.0), stop)
        timer.daemon = True
        timer.start()
        return timer


def device_peak_bytes():
    try:
        stats = jax.devices()[0].memory_stats()
        return None if not stats else stats.get("peak_bytes_in_use")
    except Exception:
        return None


def _x64():
    """A context with x64 on (``jax.enable_x64`` where this JAX has it)."""
    ctx = getattr(jax, "enable_x64", None)
    if ctx is not None:
        return ctx(True)
    from jax.experimental import enable_x64

    return enable_x64()


def git(*args):
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True)
        return out.stdout.strip()
    except Exception:
        return None


# -- 1. Monte Carlo throughput -------------------------------------------------------------------------------------


def item_mc(b: Bench, sec: Section):
    steps = b.S["mc_steps"]
    m = PSG(1.0, 0.01, adjacency="remove")
    prev = {}  # estimator -> (compile estimate s, steps/s) at the previous size
    best = {}
    for n in b.S["mc_samples"]:
        for est in ESTIMATORS:

            def run(est=est, n=n):
                def call(seed):
                    return jaxdp.montecarlo_delta(
                        m, epsilon=2.0, num_steps=steps, key=jax.random.key(seed), num_samples=n, estimator=est
                    )

                _, t1 = once(lambda: call(500))
                r, t2 = once(lambda: call(600))
                rate = n * steps / t2
                prev[est] = (max(t1 - t2, 0.0), rate)
                best[est] = max(best.get(est, 0.0), rate)
                ratio = rate / CPU_MC_RATE[est] if steps == 1000 else None
                cells = [f"{t1:.2f}", f"{t2:.3f}", f"{rate:.3e}", fmt_ratio(ratio), f"{float(r.value):.4e}"]
                cells.append(f"{float(r.stderr):.2e}")
                raw = dict(estimator=est, samples=n, steps=steps, first_s=t1, second_s=t2, steps_per_s=rate)
                return cells, raw | dict(ratio_cpu=ratio, value=float(r.value), stderr=float(r.stderr))

            predicted = None  # the first size: no estimate; a larger one after a skip or a failure: none fits
            if n != b.S["mc_samples"][0]:
                predicted = prev[est][0] + 2 * n * steps / prev[est][1] if est in prev else math.inf
            b.measure(sec, [est, f"{n:,}"], run, predicted)
    for n in b.S["naive_samples"]:  # what plain JAX sampling does on this device: the whole (n, steps) array

        def naive(n=n):
            with _x64():
                f = jax.jit(lambda k: m.sample_privacy_loss(k, (n, steps)).sum(1))
                _, t1 = once(lambda: f(jax.random.key(700)))
                _, t2 = once(lambda: f(jax.random.key(701)))
            rate = n * steps / t2
            prev["naive"] = (max(t1 - t2, 0.0), rate)
            ratio = rate / CPU_NAIVE_RATE if steps == 1000 else None
            cells = [f"{t1:.2f}", f"{t2:.3f}", f"{rate:.3e}", fmt_ratio(ratio), "—", "—"]
            return cells, dict(estimator="naive", samples=n, steps=steps, first_s=t1, second_s=t2, steps_per_s=rate)

        predicted = None
        if n != b.S["naive_samples"][0]:
            predicted = prev["naive"][0] + 2 * n * steps / prev["naive"][1] if "naive" in prev else math.inf
        b.measure(sec, ["naive JAX sampling (x64)", f"{n:,}"], naive, predicted)
    try:
        from jaxdp.accountants.montecarlo import _engine

        sec.notes.append(
            f"The engine samples chunks of {_engine.CHUNK:,} samples (blocks of {_engine.BLOCK} steps), the chunks "
            f"one after another (`lax.map`) on each of the {len(jax.local_devices())} local device(s)."
        )
    except Exception as e:
        sec.notes.append(f"(engine constants not found: {_cell(_err(e))})")
    for est in ESTIMATORS:
        if est in best:
            ratio = best[est] / CPU_MC_RATE[est] if steps == 1000 else None
            b.summary.append(
                (
                    f"MC throughput, {est} ({steps} steps, best size), sampled steps/s",
                    f">= {TARGET_MC_RATE:.0e}",
                    f"{CPU_MC_RATE[est]:.2e}",
                    f"{best[est]:.2e}",
                    fmt_ratio(ratio),
                )
            )


# -- 2. delta ~ 7e-10 ----------------------------------------------------------------------------------------------


def item_tiny(b: Bench, sec: Section):
    m = PSG(TINY["sigma"], TINY["q"], adjacency="remove")
    steps, ref = TINY["steps"], TINY["reference"]
    state = {}
    for i, n in enumerate(b.S["tiny_samples"]):
        first = i == 0

        def run(n=n, first=first):
            def call(seed):
                return jaxdp.montecarlo_delta(
                    m, epsilon=TINY["epsilon"], num_steps=steps, key=jax.random.key(seed), num_samples=n
                )

            r, t1 = once(lambda: call(200))
            t2 = None
            if first:  # a second call (a new seed) separates compilation from sampling
                _, t2 = once(lambda: call(201))
                state["compile_s"], state["rate"] = max(t1 - t2, 0.0), n * steps / t2
            v, se = float(r.value), float(r.stderr)
            rse = se / v if v > 0 else float("nan")
            run_s = t2 if t2 is not None else max(t1 - state.get("compile_s", 0.0), 1e-9)
            cells = [f"{v:.4e}", f"{(v - ref) / ref:+.1e}", f"{(v - ref) / se:+.2f}" if se > 0 else "n/a"]
            cells += [f"{100 * rse:.3f}%", f"{t1:.2f}", fmt_s(t2), f"{n * steps / run_s:.2e}"]
            return cells, dict(samples=n, value=v, stderr=se, rel_stderr=rse, first_s=t1, second_s=t2)

        predicted = None if first else state["compile_s"] + n * steps / state["rate"] if state else math.inf
        raw = b.measure(sec, [f"{n:,}"], run, predicted)
        if raw and raw["samples"] == CPU_TINY["samples"]:
            b.summary.append(
                (
                    f"delta ~ 7e-10: tilted, {CPU_TINY['samples']:.0e} samples, seconds incl. compile "
                    f"(rel. stderr {100 * raw['rel_stderr']:.2f}%)",
                    "rel. stderr <= 2%",
                    f"{CPU_TINY['seconds']:.1f} s",
                    f"{raw['first_s']:.1f} s",
                    fmt_ratio(CPU_TINY["seconds"] / raw["first_s"]),
                )
            )


# -- 3. vectorised epsilon sweeps ----------------------------------------------------------------------------------


def _eps(method, s, q, n, d):
    return jaxdp.epsilon_for_delta(PSG(s, q), delta=d, num_steps=n, method=method)


def issue_grid(n=10_000, seed=0):
    """``bench_saddlepoint._issue_targets``'s grid (the same draws; float32 like there, x64 off)."""
    rng = np.random.default_rng(seed)
    sig = rng.uniform(0.5, 5.0, n)
    q = np.exp(rng.uniform(np.log(1e-4), np.log(0.5), n))
    steps = np.round(np.exp(rng.uniform(0.0, np.log(1e6), n)))
    dl = np.exp(rng.uniform(np.log(1e-15), np.log(1e-3), n))
    return jnp.stack([jnp.asarray(sig), jnp.asarray(q), jnp.asarray(steps), jnp.asarray(dl)], axis=1)


def _vmapped(method):
    return jax.vmap(lambda a: _eps(method, a[0], a[1], a[2], a[3]))


def _timed_runs(fn, x):
    """First run after compilation, then (if it was quick) the median of three more."""
    out, first = once(lambda: fn(x))
    reps = [once(lambda: fn(x))[1] for _ in range(3)] if first < 2.0 else []
    return out, first, (statistics.median(reps) if reps else first)


def sweep_one(b: Bench, sec: Section, method, xs, n, how="jax.vmap", predicted=None):
    def run():
        x = xs[:n]
        if how == "jax.vmap":
            fn = jax.jit(_vmapped(method))
        else:  # lax.map over vmapped batches of 1,000 (how the CPU figure for 10,000 was taken)
            fn = jax.jit(lambda x: jax.lax.map(lambda a: _eps(method, a[0], a[1], a[2], a[3]), x, batch_size=1000))
        t = time.perf_counter()
        lowered = fn.lower(x)
        t_lower = time.perf_counter() - t
        compiled = lowered.compile()
        t_compile = time.perf_counter() - t - t_lower
        out, first, run_s = _timed_runs(compiled, x)
        out = np.asarray(out)
        b.outputs[(method, n)] = (out, t_lower + t_compile)
        bad = int(np.sum(~np.isfinite(out)))
        cpu = CPU_SWEEP_S.get((method, n))
        target = ("met" if run_s <= TARGET_SWEEP_S else "**not met**") if n == 10_000 else ""
        cells = [f"{t_lower:.1f} + {t_compile:.1f}", fmt_s(first), fmt_s(run_s), fmt_per(run_s / n)]
        cells += [str(bad), fmt_s(cpu), fmt_ratio(cpu / run_s if cpu else None), target]
        raw = dict(method=method, n=n, how=how, lower_s=t_lower, compile_s=t_compile, first_s=first, run_s=run_s)
        finite = out[np.isfinite(out)]
        raw |= dict(nonfinite=bad, cpu_s=cpu, eps_median=float(np.median(finite)) if finite.size else None)
        return cells, raw

    return b.measure(sec, [method, f"{n:,}", how], run, predicted)


def sweep_method(b: Bench, sec: Section, method, xs, first_guess=None):
    small, large = b.S["sweep_n"]
    r1 = sweep_one(b, sec, method, xs, small, predicted=first_guess)
    predicted = math.inf  # the small size was skipped or failed: the large one is not tried
    if r1:  # compile again (a new shape) and run ~4 times, each ~large/small times the small one
        predicted = r1["lower_s"] + r1["compile_s"] + (large / small) * (r1["first_s"] + 3 * r1["run_s"])
    r2 = sweep_one(b, sec, method, xs, large, predicted=predicted)
    if r2 is None and r1 is not None and not sec.raw[-1].get("skipped"):  # (an error, e.g. out of memory)
        sweep_one(b, sec, method, xs, large, how="lax.map(batch_size=1000)", predicted=predicted)
    for r in (r1, r2):
        if r and (method, r["n"]) in CPU_SWEEP_S and r["n"] == 10_000:
            b.summary.append(
                (
                    f"epsilon sweep, {method}, 10,000 configurations (s after compile)",
                    f"<= {TARGET_SWEEP_S:g} s",
                    f"{CPU_SWEEP_S[(method, 10_000)]:.2f} s",
                    f"{r['run_s']:.3f} s (compile {r['lower_s'] + r['compile_s']:.0f} s)",
                    fmt_ratio(CPU_SWEEP_S[(method, 10_000)] / r["run_s"]),
                )
            )


TINY_COLUMNS = ["samples", "delta estimate", "rel. err", "z", "rel. stderr", "first call s (incl. compile)"]
TINY_COLUMNS += ["second call s", "sampled steps / s"]
SWEEP_COLUMNS = ["method", "configs", "how", "lower + compile s", "first run s", "run s (median)", "per config"]
SWEEP_COLUMNS += ["non-finite", "CPU s", "speed-up vs CPU", "<= 3 s"]


def item_sweep(b: Bench, sec: Section):
    xs = issue_grid()
    for method in SWEEP_METHODS[:2]:
        sweep_method(b, sec, method, xs)


def item_characteristic(b: Bench, sec: Section):
    # "characteristic" has a fallback (certified) chosen by lax.cond; under vmap both branches run
    sweep_method(b, sec, "characteristic", issue_grid(), first_guess=60.0)


# -- 4. one query --------------------------------------------------------------------------------------------------


def item_query(b: Bench, sec: Section):
    calls = b.S["query_calls"]
    for method in SWEEP_METHODS[:2]:

        def run(method=method):
            f = jax.jit(lambda s: _eps(method, s, 1e-3, 10_000, 1e-6))
            v, t1 = once(lambda: f(1.0))
            times = [once(lambda: f(1.0))[1] for _ in range(calls)]
            med = statistics.median(times)
            cpu = CPU_QUERY_MS[method]
            cells = [f"{float(v):.6g}", f"{t1:.1f}", f"{1e3 * med:.3f}", f"{1e3 * min(times):.3f}", f"{cpu:.2f}"]
            cells.append(fmt_ratio(cpu / (1e3 * med)))
            return cells, dict(method=method, value=float(v), first_s=t1, median_s=med, times_s=times, cpu_ms=cpu)

        raw = b.measure(sec, [method], run)
        if raw:
            b.summary.append(
                (
                    f"one epsilon query, {method}, ms after compile (median of {calls})",
                    f"<= {TARGET_QUERY_MS:g} ms",
                    f"{raw['cpu_ms']:.2f} ms",
                    f"{1e3 * raw['median_s']:.3f} ms",
                    fmt_ratio(raw["cpu_ms"] / (1e3 * raw["median_s"])),
                )
            )


# -- 5. calibration ------------------------------------------------------------------------------------------------


def item_calibrate(b: Bench, sec: Section):
    n = b.S["calib_n"]
    rng = np.random.default_rng(1)
    target = np.exp(rng.uniform(np.log(0.5), np.log(10.0), n))
    q = np.exp(rng.uniform(np.log(1e-3), np.log(0.1), n))
    steps = np.round(np.exp(rng.uniform(np.log(100.0), np.log(1e5), n)))
    state = {}

    def call():
        return jaxdp.calibrate_noise_multiplier(target_epsilon=target, delta=1e-5, sampling_prob=q, num_steps=steps)

    def run(which):
        r, t = once(call)
        state[which] = t
        status = np.asarray(r.status)
        ok = np.asarray(r.epsilon_certified) <= target * (1 + 1e-12)
        counts = ", ".join(f"{int(s)}: {int(c)}" for s, c in zip(*np.unique(status, return_counts=True)))
        sigma = np.asarray(r.noise_multiplier)
        cells = [f"{t:.2f}", f"{1e3 * t / n:.2f} ms", counts, f"{int(ok.sum())}/{n}"]
        cells.append(f"{np.nanmin(sigma):.3g} .. {np.nanmax(sigma):.3g}")
        return cells, dict(which=which, seconds=t, status_counts=counts, certified_ok=int(ok.sum()), n=n)

    if b.measure(sec, ["first call (compiles)", f"{n:,}"], lambda: run("first"), 60.0):
        b.measure(sec, ["second call", f"{n:,}"], lambda: run("second"), state["first"])


# -- 6. device vs host CPU -----------------------------------------------------------------------------------------


def item_agree(b: Bench, sec: Section):
    k = b.S["agree_n"]
    cpu = jax.devices("cpu")[0]
    if jax.default_backend() == "cpu":
        sec.notes.append("The default backend is the CPU: this check compares the CPU with itself.")
    xs = issue_grid()[:k]
    for method in SWEEP_METHODS:
        if (method, b.S["sweep_n"][0]) not in b.outputs:
            continue
        dev, compile_s = b.outputs[(method, b.S["sweep_n"][0])]

        def run(method=method, dev=dev):
            with jax.default_device(cpu):
                out, t = once(lambda: jax.jit(_vmapped(method))(jax.device_put(xs, cpu)))
            host, dev = np.asarray(out), dev[:k]
            both = np.isfinite(host) & np.isfinite(dev)
            rel = np.abs(dev[both] - host[both]) / np.maximum(np.abs(host[both]), 1e-30)
            mismatch = int(np.sum(np.isfinite(host) != np.isfinite(dev)))
            worst = float(rel.max()) if rel.size else float("nan")
            med = float(np.median(rel)) if rel.size else float("nan")
            cells = [f"{worst:.2e}", f"{med:.2e}", str(mismatch), f"{t:.1f}"]
            return cells, dict(method=method, k=k, max_rel=worst, median_rel=med, finite_mismatch=mismatch, host_s=t)

        b.measure(sec, [method, f"{k}"], run, compile_s + 5.0)  # (the host compiles about as long)


# -- main ----------------------------------------------------------------------------------------------------------


def header(b: Bench, a):
    commit = git("rev-parse", "--short", "HEAD")
    dirty = git("status", "--porcelain", "--", "jaxdp", "benchmarks/bench_gpu.py")
    commit_text = commit or a.commit or "unknown"
    if commit and a.commit and not commit.startswith(a.commit) and not a.commit.startswith(commit):
        commit_text += f" (--commit says {a.commit})"
    if dirty:
        commit_text += " plus uncommitted changes: " + ", ".join(x.split()[-1] for x in dirty.splitlines())
    devices = jax.devices()
    kinds = sorted({getattr(d, "device_kind", "?") for d in devices})
    try:
        import jaxlib

        jaxlib_version = jaxlib.__version__
    except Exception:
        jaxlib_version = "?"
    now = datetime.datetime.now(datetime.timezone.utc)
    b.record |= dict(
        jax=jax.__version__,
        jaxlib=jaxlib_version,
        devices=[str(d) for d in devices],
        device_kind=kinds,
        backend=jax.default_backend(),
        date=now.isoformat(timespec="seconds"),
        commit=commit_text,
        python=platform.python_version(),
        cpu_count=os.cpu_count(),
        quick=a.quick,
        budget_s=a.budget_s,
        hard_s=a.hard_s,
        sizes=b.S,
    )
    b.head = [
        "# jaxdp on an accelerator: Monte Carlo throughput and vectorised epsilon sweeps",
        "",
        f"JAX {jax.__version__} (jaxlib {jaxlib_version}), backend `{jax.default_backend()}`, devices "
        f"{', '.join(f'`{d}`' for d in devices)} ({', '.join(kinds)}); {os.cpu_count()} host CPU cores, "
        f"Python {platform.python_version()}.  Date {now.strftime('%Y-%m-%d %H:%M')} UTC.  jaxdp commit "
        f"`{commit_text}`.",
        "",
        f"`benchmarks/bench_gpu.py`: time budget {a.budget_s:.0f} s (measurements predicted not to fit are "
        f"skipped), watchdog at {a.hard_s:.0f} s.  CPU figures: this project's 2-core CPU, from "
        "`benchmarks/results/montecarlo.md` and `benchmarks/results/saddlepoint.md`.  Seconds are wall time "
        "with results blocked on (`jax.block_until_ready`).",
        "",
    ]
    if a.quick:
        b.head += ["**`--quick` smoke run: tiny sizes, the numbers are not measurements.**", ""]


ITEMS = ("mc", "tiny", "sweep", "query", "characteristic", "calibrate", "agree")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run; numbers meaningless)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "gpu.md"), help="markdown report (+ .json)")
    ap.add_argument("--commit", default=None, help="jaxdp commit to report when git cannot tell")
    ap.add_argument("--budget-s", type=float, default=None, help="time budget in seconds (280; --quick: 150)")
    ap.add_argument("--hard-s", type=float, default=None, help="watchdog: write and exit (default budget + 30 s)")
    ap.add_argument("--only", default=None, help=f"comma-separated items to run, of {','.join(ITEMS)}")
    a = ap.parse_args(argv)
    if a.budget_s is None:
        a.budget_s = 150.0 if a.quick else 280.0
    if a.hard_s is None:
        a.hard_s = a.budget_s + 30.0
    only = set(a.only.split(",")) if a.only else set(ITEMS)
    if only - set(ITEMS):
        ap.error(f"unknown items {sorted(only - set(ITEMS))}; choose from {ITEMS}")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)

    b = Bench(a, sizes(a.quick))
    b.watchdog(a.hard_s)
    header(b, a)
    b.log(f"jax {jax.__version__}, devices {jax.devices()}, budget {a.budget_s:.0f} s, out {a.out}")
    b.write()
    S = b.S
    mc_cols = ["estimator", "samples", "first call s (compile + run)", "second call s", "sampled steps / s"]
    mc_cols += ["vs CPU (2 cores)", "delta estimate", "stderr"]
    items = [
        (
            "mc",
            "1. Monte Carlo throughput",
            [
                f"`montecarlo_delta`, PSG sigma = 1, q = 0.01, eps = 2, {S['mc_steps']} steps, adjacency `remove`, "
                "float64 (as `bench_montecarlo.py` section 5).  Sampled steps per second = samples x steps / seconds "
                "of the second call (the first compiles; `num_samples` is static, so each size compiles).  CPU: "
                f"{', '.join(f'{k} {v:.2e}' for k, v in CPU_MC_RATE.items())} steps/s (best of 2^16..2^18 samples); "
                f"naive JAX sampling {CPU_NAIVE_RATE:.2e} (2^16 samples): "
                "`jax.jit(lambda k: m.sample_privacy_loss(k, (B, T)).sum(1))` with x64, the whole array in memory.",
            ],
            mc_cols,
            2,
            item_mc,
        ),
        (
            "tiny",
            "2. delta ~ 7e-10 (tilted)",
            [
                f"PSG sigma = {TINY['sigma']}, q = {TINY['q']}, {TINY['steps']} steps, eps = {TINY['epsilon']}, "
                f"adjacency `remove` (the dominating direction), estimator `tilted`; reference delta "
                f"{TINY['reference']:.6e} (`tests/reference_values.py`).  CPU: 10^6 samples in "
                f"{CPU_TINY['seconds']} s including compilation, rel. stderr {100 * CPU_TINY['rel_stderr']:.2f}%.  "
                "Steps/s: of the second call for the first size; for the others, (first call - the first size's "
                "compile time) (one call only, to save time).",
            ],
            TINY_COLUMNS,
            1,
            item_tiny,
        ),
        (
            "sweep",
            "3. Vectorised epsilon sweeps over the issue's grid",
            [
                "Grid of `bench_saddlepoint.py` `_issue_targets` (seed 0): sigma uniform in [0.5, 5]; q, steps and "
                "delta log-uniform in [1e-4, 0.5], [1, 1e6], [1e-15, 1e-3]; add_or_remove, x64 off (float32 "
                "inputs and outputs, float64 inside).  `jax.jit(jax.vmap(epsilon_for_delta))` over the first n "
                "configurations, compiled ahead of time (`lower` + `compile` apart), then the first run and the "
                "median of three more (only when the first took < 2 s).  The CPU's 10,000 figure was taken with "
                "`jax.lax.map(batch_size=1000)`, its 1,000 figure with `jax.vmap`.",
            ],
            SWEEP_COLUMNS,
            3,
            item_sweep,
        ),
        (
            "query",
            "4. One epsilon query (sigma 1, q 1e-3, 10,000 steps, delta 1e-6)",
            [f"`jax.jit(lambda s: epsilon_for_delta(...))(1.0)`: first call, then {S['query_calls']} calls."],
            ["method", "epsilon", "first call s", "median ms", "min ms", "CPU ms", "speed-up"],
            1,
            item_query,
        ),
        (
            "characteristic",
            "5. Vectorised epsilon sweeps: characteristic",
            [
                'As section 3 with `method="characteristic"`.  Its public entry point falls back to `certified` '
                "where it cannot vouch for its value, through a `lax.cond` that under `vmap` runs both branches: "
                "the vmapped cost includes the certified accountant.",
            ],
            SWEEP_COLUMNS,
            3,
            item_characteristic,
        ),
        (
            "calibrate",
            "6. Vectorised calibration of the noise multiplier",
            [
                f"`calibrate_noise_multiplier` over {S['calib_n']:,} targets in one call (arrays broadcast "
                'together; its defaults: `method="characteristic"`, `certify="certified-fast"`): target eps '
                "log-uniform in [0.5, 10], q in [1e-3, 0.1], steps in [100, 1e5], delta 1e-5 (seed 1).  Status 0: "
                "solved; certified ok: certified epsilon <= target.",
            ],
            ["call", "targets", "seconds", "per target", "status counts", "certified ok", "sigma range"],
            2,
            item_calibrate,
        ),
        (
            "agree",
            "7. Device vs host CPU on the first configurations of the grid",
            [
                "The device's results of sections 3 and 5 (smallest size) against the same vmapped program on the host "
                "CPU backend: relative difference where both are finite, and how many differ in finiteness.",
            ],
            ["method", "configs", "max rel. diff", "median rel. diff", "finiteness differs", "host seconds"],
            2,
            item_agree,
        ),
    ]
    for key, title, intro, cols, labels, fn in items:
        if key not in only:
            continue
        sec = b.section(key, title, intro, cols, labels)
        b.log(f"== {title} (item deadline {sec.deadline:.0f} s)")
        b.item(sec, fn)
    b.footer = [f"Whole run: {b.elapsed():.1f} s (budget {a.budget_s:.0f} s)."]
    b.write()
    b.log("done")
    print(b.render(), flush=True)


if __name__ == "__main__":
    main()
