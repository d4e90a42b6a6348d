"""``jaxdp curve`` (epsilon against steps) and ``jaxdp group-curve`` (epsilon against the group size)."""

from __future__ import annotations

import json
import math
import time

from jaxdp.cli._mechanism import describe_sampling, mechanism_of
from jaxdp.cli._options import sampling_record
from jaxdp.cli._render import finite_or_none, pyplot, with_progress


def group_curve(args):
    import numpy as np

    import jaxdp

    common = dict(
        noise_multiplier=args.sigma,
        num_steps=args.steps,
        delta=args.delta,
        max_group_size=args.max_group,
        method=args.method,
        adjacency=args.adjacency,
    )
    start = time.perf_counter()
    if args.sampling == "fixed":
        curve = with_progress(
            "group curve",
            lambda: jaxdp.group_curve(
                sampling="fixed", dataset_size=args.dataset_size, batch_size=args.batch_size, **common
            ),
        )
    else:
        curve = with_progress("group curve", lambda: jaxdp.group_curve(sampling_prob=args.q, **common))
    # beside a fixed batch: what a Poisson-only accountant would report at q = B / N
    poisson = None
    if args.sampling == "fixed":
        poisson = jaxdp.group_curve(sampling_prob=args.q, **{**common, "method": curve.method})
    seconds = time.perf_counter() - start
    g = np.asarray(curve.group_sizes)
    eps = np.asarray(curve.epsilon, dtype=np.float64)
    black = np.asarray(curve.black_box_epsilon, dtype=np.float64)
    linear = g * eps[0]
    record = {
        "group_size": g.tolist(),
        "epsilon": finite_or_none(eps),
        "black_box_epsilon": finite_or_none(black),
        "linear_epsilon": finite_or_none(linear),
        "delta": args.delta,
        "method": curve.method,
        "certified": bool(jaxdp.method_info(curve.method).certified),
        "sigma": args.sigma,
        "q": args.q,
        "steps": args.steps,
        "adjacency": args.adjacency,
        "seconds": seconds,
        **sampling_record(args),
    }
    if poisson is not None:
        record["poisson_epsilon"] = finite_or_none(np.asarray(poisson.epsilon, dtype=np.float64))
    if args.plot is not None:
        group_plot(args, record)
    if args.json:
        return json.dumps(record), record
    cols = ["group_size", "epsilon", "black_box_epsilon", "linear_epsilon"]
    if poisson is not None:
        cols.insert(2, "poisson_epsilon")
    if args.csv:
        lines = [",".join(cols)]
        lines += [",".join("" if record[c][i] is None else f"{record[c][i]:.8g}" for c in cols) for i in range(len(g))]
        return "\n".join(lines), record
    head = f"  {'g':>3}  {'epsilon':>10}" + (f"  {'as Poisson':>10}" if poisson is not None else "")
    head += f"  {'black box':>10}  {'g * eps_1':>10}"
    rows = []
    for i in range(len(g)):
        vals = [record["epsilon"][i]] + ([record["poisson_epsilon"][i]] if poisson is not None else [])
        vals += [record["black_box_epsilon"][i], record["linear_epsilon"][i]]
        rows.append(f"  {g[i]:>3}" + "".join("  " + (f"{v:>10.5g}" if v is not None else f"{'inf':>10}") for v in vals))
    kind = "proven upper bounds" if record["certified"] else "estimates"
    text = (
        f"group privacy at delta = {args.delta:g}: sigma = {args.sigma:g}, {describe_sampling(args)}, "
        f"{args.steps} steps ({curve.method}, {kind}; {seconds:.2f} s)\n" + head + "\n" + "\n".join(rows)
    )
    if args.plot is not None:
        text += f"\nwrote the plot to {args.plot}"
    return text, record


def group_plot(args, record):
    plt = pyplot()
    g = record["group_size"]

    def arr(name):
        return [math.nan if v is None else v for v in record[name]]

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    label = "jaxdp: fixed batch (Thm 3.3)" if args.sampling == "fixed" else "jaxdp: mixture of Gaussians (Thm 3.1)"
    ax.plot(g, arr("epsilon"), "o-", color="C0", label=label)
    if "poisson_epsilon" in record:
        ax.plot(g, arr("poisson_epsilon"), "s--", color="C2", label=f"same, accounted as Poisson (q = {args.q:g})")
    ax.plot(g, arr("black_box_epsilon"), "^-", color="C3", label="black-box conversion (g eps, g e^((g-1) eps) delta)")
    ax.plot(g, arr("linear_epsilon"), ":", color="0.4", label="linear: g x example-level epsilon")
    gone = [k for k, v in zip(g, record["black_box_epsilon"]) if v is None]
    if gone:
        ax.text(
            0.98,
            0.03,
            f"black-box conversion: no finite epsilon for g >= {gone[0]}",
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            color="C3",
            fontsize=8,
        )
    ax.set_xlabel("group size g (records)")
    ax.set_ylabel(f"epsilon at delta = {args.delta:g}")
    ax.set_title(f"Group privacy: sigma = {args.sigma:g}, {describe_sampling(args)}, {args.steps} steps", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    plt.close(fig)


def curve(args):
    import numpy as np

    import jaxdp

    mech = mechanism_of(args)
    certify = None if args.certify.lower() == "none" else args.certify
    steps = np.unique(np.round(np.geomspace(1, args.max_steps, min(args.points, args.max_steps))).astype(int))
    start = time.perf_counter()

    def run():
        est = [
            float(jaxdp.epsilon_for_delta(mech, delta=args.delta, num_steps=int(n), method=args.method)) for n in steps
        ]
        cert = None
        if certify is not None:
            cert = [
                float(jaxdp.epsilon_for_delta(mech, delta=args.delta, num_steps=int(n), method=certify)) for n in steps
            ]
        return est, cert

    est, cert = with_progress("curve", run)
    seconds = time.perf_counter() - start
    record = {
        "steps": steps.tolist(),
        "epsilon": finite_or_none(est),
        "method": args.method,
        "certified": bool(jaxdp.method_info(args.method).certified),
        "delta": args.delta,
        "sigma": args.sigma,
        "q": args.q,
        "adjacency": args.adjacency,
        "seconds": seconds,
        **sampling_record(args),
    }
    if cert is not None:
        record["epsilon_certified"] = finite_or_none(cert)
        record["certify"] = certify
    if args.group_size is not None:
        record["group_size"] = args.group_size
    if args.plot is not None:
        curve_plot(args, record)
    if args.json:
        return json.dumps(record), record
    cols = ["steps", "epsilon"] + (["epsilon_certified"] if cert is not None else [])
    if args.csv:
        lines = [",".join(cols)]
        lines += [
            ",".join("" if record[c][i] is None else f"{record[c][i]:.8g}" for c in cols) for i in range(len(steps))
        ]
        return "\n".join(lines), record
    body = "\n".join(
        f"  {n:>8} steps: epsilon = {e:.5g}" + (f"  (certified <= {c:.5g})" if cert is not None else "")
        for n, e, c in zip(steps, est, cert if cert is not None else est)
    )
    text = (
        f"epsilon at delta = {args.delta:g}: sigma = {args.sigma:g}, {describe_sampling(args)} "
        f"({args.method} estimate" + (f", {certify} bound" if cert is not None else "") + f"; {seconds:.2f} s)\n" + body
    )
    if args.plot is not None:
        text += f"\nwrote the plot to {args.plot}"
    return text, record


def curve_plot(args, record):
    plt = pyplot()

    def arr(name):
        return [math.nan if v is None else v for v in record[name]]

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(record["steps"], arr("epsilon"), "-", color="C0", lw=2, label=f"estimate ({args.method})")
    if "epsilon_certified" in record:
        ax.plot(
            record["steps"],
            arr("epsilon_certified"),
            "--",
            color="C3",
            label=f"proven upper bound ({record['certify']})",
        )
    ax.set_xscale("log")
    ax.set_xlabel("steps (log scale)")
    ax.set_ylabel(f"epsilon at delta = {args.delta:g}")
    group = f", group of {args.group_size}" if args.group_size else ""
    ax.set_title(
        f"Privacy against training length: sigma = {args.sigma:g}, {describe_sampling(args)}{group}", fontsize=10
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    plt.close(fig)
