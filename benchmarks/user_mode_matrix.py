"""Table of the user-transformation matrix (issue 43): every cell's x64-off value against the x64-on reference.

    JAXDP_MATRIX_LOG=/tmp/matrix.jsonl python -m pytest tests/test_user_mode.py -m "slow or not slow"
    python benchmarks/user_mode_matrix.py /tmp/matrix.jsonl --out benchmarks/results/user_mode_matrix.md

Each row of the log is one cell of ``tests/test_user_mode.py`` (a method, an entry point, a transformation of the
user's f(sigma, q) with JAX's x64 off), written by the test itself; ``rel`` is the largest relative difference
from the x64-on reference (eager values; float64 central differences, or x64-on autodiff for the lattice bounds and
the real-axis baseline, whose value is not smooth enough for central differences).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log", nargs="+")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rows = [json.loads(line) for path in args.log for line in open(path) if line.strip()]
    cells = collections.OrderedDict()
    transforms = []
    for r in rows:
        key = (r["jax"], r["method"], r["kind"])
        cells.setdefault(key, {})[r["transform"]] = r
        if r["transform"] not in transforms:
            transforms.append(r["transform"])
    lines = [
        "# Public entry points under a user's transformations, x64 off (tests/test_user_mode.py)",
        "",
        f"{datetime.date.today()}: each cell is the largest relative difference of the x64-off result (float32) from",
        "the x64-on reference at the same float32 inputs (values: eager; gradients: float64 central differences, or",
        "x64-on autodiff for the lattice bounds and the real-axis baseline); an error names itself.  The test's",
        "tolerances: values 2e-6, gradients 2e-4 (with an absolute 1e-6).",
        "",
        "| JAX | method | entry point | " + " | ".join(f"`{t}`" for t in transforms) + " |",
        "|---|---|---|" + "---|" * len(transforms),
    ]
    for (jax_version, method, kind), got in cells.items():
        out = []
        for t in transforms:
            r = got.get(t)
            out.append("" if r is None else (f"**{r['error'][:60]}**" if "error" in r else f"{r['rel']:.1e}"))
        lines.append(f"| {jax_version} | `{method}` | {kind} | " + " | ".join(out) + " |")
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    print(text)


if __name__ == "__main__":
    main()
