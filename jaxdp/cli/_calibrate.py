"""``jaxdp calibrate`` and ``jaxdp sweep``: the noise multiplier (or q, or steps) for a privacy budget."""

from __future__ import annotations

import functools
import json
import math
import time

from jaxdp.cli._mechanism import mechanism_of, with_options
from jaxdp.cli._options import sampling_record
from jaxdp.cli._render import finite_or_none, pyplot


def calibrate(args):
    import jaxdp

    certify = None if args.certify.lower() == "none" else args.certify
    common = {"target_epsilon": args.target_epsilon, "delta": args.delta, "method": args.method, "certify": certify}
    start = time.perf_counter()
    if args.solve_for == "sigma" and args.sampling == "fixed":
        family = functools.partial(mechanism_of, args)
        r = jaxdp.calibrate_noise_multiplier(num_steps=args.steps, mechanism=family, sigma_max=args.sigma_max, **common)
    elif args.solve_for == "sigma":
        if args.group_size is not None and args.group_size != 1:
            family = functools.partial(mechanism_of, args)
            r = jaxdp.calibrate_noise_multiplier(
                num_steps=args.steps, mechanism=family, sigma_max=args.sigma_max, **common
            )
        else:
            r = jaxdp.calibrate_noise_multiplier(
                sampling_prob=args.q, num_steps=args.steps, sigma_max=args.sigma_max, **common
            )
    elif args.solve_for == "q":
        r = jaxdp.calibrate_sampling_prob(noise_multiplier=args.sigma, num_steps=args.steps, **common)
    else:
        r = jaxdp.calibrate_num_steps(
            noise_multiplier=args.sigma, sampling_prob=args.q, max_steps=args.steps_max, **common
        )
    seconds = time.perf_counter() - start
    steps = float(r.num_steps)
    record = {
        "solve_for": args.solve_for,
        "sigma": float(r.noise_multiplier),
        "q": float(r.sampling_prob) if args.solve_for == "q" else args.q,
        "steps": int(steps) if math.isfinite(steps) else None,
        "target_epsilon": args.target_epsilon,
        "delta": args.delta,
        "epsilon_estimate": float(r.epsilon_estimate),
        "epsilon_certified": None if certify is None else float(r.epsilon_certified),
        "method": r.method,
        "certify": r.certify,
        "status": r.message,
        "iterations": int(r.iterations),
        "seconds": seconds,
    }
    if args.group_size is not None:
        record["group_size"] = args.group_size
    record.update(sampling_record(args))
    if args.json:
        return json.dumps(record), record
    cert = "not checked" if certify is None else f"{record['epsilon_certified']:.6g} ({r.certify}, proven)"
    text = (
        f"calibrated {args.solve_for} for epsilon <= {args.target_epsilon:g} at delta = {args.delta:g}\n"
        f"  sigma             = {record['sigma']:.6g}\n"
        f"  q                 = {record['q']:.6g}\n"
        f"  steps             = {record['steps']}\n"
        f"  epsilon_estimate  = {record['epsilon_estimate']:.6g} ({r.method})\n"
        f"  epsilon_certified = {cert}\n"
        f"  status            = {r.message}\n"
        f"  seconds           = {seconds:.3f}"
    )
    return text, record


def sweep(args):
    import csv
    import io
    import types

    import numpy as np

    import jaxdp

    certify = None if args.certify.lower() == "none" else args.certify
    if args.q is None:
        raise ValueError("sweep needs --q, or --dataset-size with --batch-size.")
    q = np.asarray(args.q, dtype=np.float64)
    steps = np.asarray(args.steps, dtype=np.float64)
    start = time.perf_counter()
    if args.sampling == "fixed":  # one mixture per batch size: a calibration per cell
        cells = []
        for n_steps in steps:
            for b in args.batch_size:
                family = functools.partial(mechanism_of, with_options(args, batch_size=int(b)))
                cells.append(
                    jaxdp.calibrate_noise_multiplier(
                        target_epsilon=args.target_epsilon,
                        delta=args.delta,
                        num_steps=int(n_steps),
                        mechanism=family,
                        method=args.method,
                        certify=certify,
                    )
                )
        shape = (steps.size, q.size)

        r = types.SimpleNamespace(
            noise_multiplier=np.reshape([float(c.noise_multiplier) for c in cells], shape),
            epsilon_estimate=np.reshape([float(c.epsilon_estimate) for c in cells], shape),
            epsilon_certified=np.reshape([float(c.epsilon_certified) for c in cells], shape),
            message=[c.message for c in cells],
        )
    else:
        r = jaxdp.calibrate_noise_multiplier(
            target_epsilon=args.target_epsilon,
            delta=args.delta,
            sampling_prob=q[None, :],
            num_steps=steps[:, None],
            method=args.method,
            certify=certify,
        )
    sigma = np.asarray(r.noise_multiplier)
    seconds = time.perf_counter() - start
    messages = r.message
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["q", "steps", "sigma", "epsilon_estimate", "epsilon_certified", "status"])
    eps_e, eps_c = np.asarray(r.epsilon_estimate), np.asarray(r.epsilon_certified)
    for i in range(steps.size):
        for j in range(q.size):
            k = i * q.size + j
            writer.writerow(
                [
                    f"{q[j]:g}",
                    f"{steps[i]:g}",
                    f"{sigma[i, j]:.8g}",
                    f"{eps_e[i, j]:.8g}",
                    f"{eps_c[i, j]:.8g}",
                    messages[k],
                ]
            )
    text = buf.getvalue()
    if args.out is not None:
        with open(args.out, "w") as fh:
            fh.write(text)
        text = f"wrote {q.size * steps.size} calibrations to {args.out} in {seconds:.2f} s"
    if args.plot is not None:
        heatmap(args, q, steps, sigma)
        text += f"\nwrote the heatmap to {args.plot}"
    if args.json:
        cells = [
            {
                "q": float(q[j]),
                "steps": int(steps[i]),
                "sigma": finite_or_none([sigma[i, j]])[0],
                "epsilon_estimate": finite_or_none([eps_e[i, j]])[0],
                "epsilon_certified": finite_or_none([eps_c[i, j]])[0],
                "status": messages[i * q.size + j],
            }
            for i in range(steps.size)
            for j in range(q.size)
        ]
        record = {
            "target_epsilon": args.target_epsilon,
            "delta": args.delta,
            "method": args.method,
            "certify": certify,
            "seconds": seconds,
            **sampling_record(args),
            "cells": cells,
        }
        return json.dumps(record), record
    return text.rstrip("\n"), None


def heatmap(args, q, steps, sigma):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * q.size, 1.0 + 0.6 * steps.size))
    im = ax.imshow(sigma, origin="lower", aspect="auto", cmap="viridis")
    ax.set_xticks(range(q.size), [f"{v:g}" for v in q])
    ax.set_yticks(range(steps.size), [f"{v:g}" for v in steps])
    ax.set_xlabel("sampling probability q")
    ax.set_ylabel("steps")
    for i in range(steps.size):
        for j in range(q.size):
            ax.text(j, i, f"{sigma[i, j]:.3g}", ha="center", va="center", color="w", fontsize=8)
    ax.set_title(f"noise multiplier for eps <= {args.target_epsilon:g}, delta = {args.delta:g}")
    fig.colorbar(im, ax=ax, label="sigma")
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    plt.close(fig)
