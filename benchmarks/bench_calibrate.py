"""Targets of calibration (issue 6): tight, never over budget, fast, vectorised, differentiable.

    python benchmarks/bench_calibrate.py [--out benchmarks/results/calibrate.md] [--grid 1000] [--no-peers]

On this machine, in one process:
* the reference budget (eps = 8, delta = 1e-5, q = 0.01, 2000 steps): jaxdp's calibrated sigma
  against the oracle's tight sigma, its certified epsilon, and the time of one call after
  compilation, beside dp_accounting's ``calibrate_dp_mechanism`` with its PLD and RDP accountants;
* a grid of (q, steps) configurations calibrated in one call: with the fast estimate only, and
  with the certified check (the latter on a sub-grid, per-configuration time reported), against
  looping the fastest peer (dp_accounting RDP calibration, timed on a few configurations);
* implicit gradients of sigma against float64 central differences.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

import reference_values  # noqa: E402
from _timing import median_time, once  # noqa: E402

import jaxdp  # noqa: E402

SIGMA_STAR = reference_values.SIGMA_STAR_EPS8


def _peer_calibration(accountant: str):
    from dp_accounting import dp_event, mechanism_calibration, pld, rdp

    def make(sigma):
        return dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(sigma)), 2000)

    if accountant == "pld":
        factory = lambda: pld.PLDAccountant(value_discretization_interval=1e-4)  # noqa: E731 (add or remove)
    else:
        factory = rdp.RdpAccountant
    return once(
        lambda: mechanism_calibration.calibrate_dp_mechanism(
            factory, make, 8.0, 1e-5, mechanism_calibration.LowerEndpointAndGuess(0.1, 1.0)
        )
    )


def reference_budget(lines, peers):
    lines += ["## The reference budget: eps = 8, delta = 1e-5, q = 0.01, 2000 steps", ""]
    lines += ["| calibrator | sigma | rel. to tight sigma | certified eps | seconds | ratio to jaxdp |"]
    lines += ["|---|---|---|---|---|---|"]
    rows = []
    pairs = [
        ("characteristic", "certified-fast"),  # the default
        ("characteristic", "certified"),
        ("saddlepoint", "certified-fast"),
        ("characteristic", None),
        ("saddlepoint", None),
    ]
    for method, certify in pairs:

        def f(method=method, certify=certify):
            r = jaxdp.calibrate_noise_multiplier(
                target_epsilon=8.0, delta=1e-5, sampling_prob=0.01, num_steps=2000, method=method, certify=certify
            )
            r.noise_multiplier.block_until_ready()
            return r

        sec = median_time(f, repeats=5)
        r = f()
        rows.append((f"jaxdp {method} + {certify}", float(r.noise_multiplier), float(r.epsilon_certified), sec))
    base = rows[0][3]
    for name, sigma, eps_c, sec in rows:
        cert = "—" if np.isnan(eps_c) else f"{eps_c:.6f}"
        rel = sigma / SIGMA_STAR - 1
        lines.append(f"| {name} | {sigma:.6f} | {rel:+.1e} | {cert} | {sec:.3f} | {sec / base:.2f} |")
    if peers:
        for acc in ("pld", "rdp"):
            sigma, sec = _peer_calibration(acc)
            lines.append(
                f"| dp_accounting {acc.upper()} | {sigma:.6f} | {sigma / SIGMA_STAR - 1:+.1e} | — | {sec:.2f} | "
                f"{sec / base:.0f} |"
            )
    lines += ["", f"Tight sigma (shared oracle): {SIGMA_STAR}.", ""]
    return rows


def grid(lines, n_grid, peers):
    side = round(float(np.sqrt(n_grid)))
    qs = np.geomspace(1e-3, 0.1, side)
    steps = np.round(np.geomspace(100, 20000, side))
    q_grid, n_grid_ = np.meshgrid(qs, steps)
    total = q_grid.size
    lines += [f"## A grid of {total} (q, steps) configurations, eps = 4, delta = 1e-5", ""]
    lines += ["| calibration | configurations | seconds (after compilation) | per configuration | all within budget |"]
    lines += ["|---|---|---|---|---|"]

    def run(method, certify, q, n):
        return once(
            lambda: jaxdp.calibrate_noise_multiplier(
                target_epsilon=4.0, delta=1e-5, sampling_prob=q, num_steps=n, method=method, certify=certify
            )
        )

    run("saddlepoint", None, q_grid, n_grid_)  # compile
    r, sec = run("saddlepoint", None, q_grid, n_grid_)
    lines.append(f"| saddlepoint estimate, no check | {total} | {sec:.2f} | {sec / total * 1e3:.1f} ms | (estimate) |")
    fast = sec
    r, sec = run("characteristic", None, q_grid, n_grid_)
    r, sec = run("characteristic", None, q_grid, n_grid_)
    per = sec / total * 1e3
    lines.append(f"| characteristic estimate, no check | {total} | {sec:.2f} | {per:.1f} ms | (estimate) |")
    checked = {}
    for method in ("saddlepoint", "characteristic"):
        run(method, "certified-fast", q_grid, n_grid_)
        r, sec = run(method, "certified-fast", q_grid, n_grid_)
        checked[method] = sec
        ok = bool(np.all(np.asarray(r.epsilon_certified) <= 4.0) and np.all(np.asarray(r.status) == 0))
        lines.append(
            f"| {method} + certified-fast check | {total} | {sec:.2f} | {sec / total * 1e3:.1f} ms | "
            f"{'yes' if ok else 'NO'} |"
        )
    sub = slice(0, None, max(1, total // 50))
    q_sub, n_sub = q_grid.ravel()[sub], n_grid_.ravel()[sub]
    run("characteristic", "certified", q_sub, n_sub)
    r, sec = run("characteristic", "certified", q_sub, n_sub)
    ok = bool(np.all(np.asarray(r.epsilon_certified) <= 4.0) and np.all(np.asarray(r.status) == 0))
    lines.append(
        f"| characteristic + certified check | {q_sub.size} (sub-grid) | {sec:.2f} | {sec / q_sub.size * 1e3:.0f} ms | "
        f"{'yes' if ok else 'NO'} |"
    )
    if peers:
        from dp_accounting import dp_event, mechanism_calibration, rdp

        times = []
        for q, n in list(zip(q_sub, n_sub))[:5]:

            def make(sigma, q=q, n=n):
                return dp_event.SelfComposedDpEvent(
                    dp_event.PoissonSampledDpEvent(float(q), dp_event.GaussianDpEvent(sigma)), int(n)
                )

            _, sec = once(
                lambda make=make: mechanism_calibration.calibrate_dp_mechanism(
                    rdp.RdpAccountant, make, 4.0, 1e-5, mechanism_calibration.LowerEndpointAndGuess(0.1, 1.0)
                )
            )
            times.append(sec)
        per = float(np.mean(times))
        lines.append(
            f"| dp_accounting RDP calibration, looped | 5 (timed) | {per * 5:.2f} | {per * 1e3:.0f} ms | "
            f"(RDP: looser) |"
        )
        lines += [
            "",
            f"Looping the peer over all {total} configurations would take ~{per * total:.0f} s: "
            f"{per * total / fast:.0f}x the saddlepoint grid, {per * total / checked['saddlepoint']:.0f}x the "
            f"saddlepoint + certified-fast one, {per * total / checked['characteristic']:.0f}x the default pair "
            "(characteristic + certified-fast) (extrapolated from the timed configurations).",
        ]
    lines.append("")


def gradients(lines):
    import jax
    import jax.numpy as jnp

    lines += ["## Implicit gradients of sigma (characteristic estimate, no check) vs central differences", ""]
    lines += ["| argument | implicit | finite difference | rel. diff |", "|---|---|---|---|"]

    def f(t, d, q, n):
        return jaxdp.calibrate_noise_multiplier(
            target_epsilon=t, delta=d, sampling_prob=q, num_steps=n, certify=None
        ).noise_multiplier

    x = (8.0, 1e-5, 0.01, 2000.0)
    with jax.enable_x64(True):
        grads = jax.grad(f, argnums=(0, 1, 2, 3))(*(jnp.float64(v) for v in x))
    worst = 0.0
    for k, (name, h) in enumerate([("target eps", 1e-4), ("delta", 1e-9), ("q", 1e-6), ("steps", 1.0)]):
        up, down = list(x), list(x)
        up[k] += h
        down[k] -= h
        fd = (float(f(*up)) - float(f(*down))) / (2 * h)
        g = float(grads[k])
        worst = max(worst, abs(g / fd - 1))
        lines.append(f"| {name} | {g:.8e} | {fd:.8e} | {g / fd - 1:+.1e} |")
    lines += ["", f"Worst relative difference: {worst:.1e} (target 1e-5).", ""]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(HERE, "results", "calibrate.md"))
    parser.add_argument("--grid", type=int, default=1000)
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args()
    lines = ["# Calibration (issue 6)", "", "Generated by `python benchmarks/bench_calibrate.py` on this CPU.", ""]
    reference_budget(lines, not args.no_peers)
    grid(lines, args.grid, not args.no_peers)
    gradients(lines)
    text = "\n".join(lines)
    with open(args.out, "w") as fh:
        fh.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
