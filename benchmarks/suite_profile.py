"""Where the default test suite's time goes: wall time per test and the XLA programs each test compiled.

Run the suite with ``JAXDP_TEST_PROFILE=DIR`` (``tests/conftest.py`` then writes, per xdist worker, the seconds
JAX spent tracing, lowering and compiling during each test, and the name and compile time of each program it
compiled, and every test's wall time; older profiles need ``--durations=0`` in the log) into a log, then::

    python benchmarks/suite_profile.py DIR LOG [--out benchmarks/results/test_suite.md] [--label "cold, 2 cores"]

It writes the 25 slowest tests (wall), the compile seconds per test file, and the programs compiled most often
under one name (the same maths traced into several programs), so that a change to the suite can be judged by the
programs it adds.  From an empty cache (``JAXDP_TEST_XLA_CACHE`` pointing at a new directory) the figures are
the cold ones a new contributor or CI meets.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import pathlib
import re


def load_profile(directory):
    tests = {}
    for path in sorted(pathlib.Path(directory).glob("profile-*.json")):
        for nodeid, rec in json.loads(path.read_text()).items():
            tests[nodeid] = rec
    return tests


def load_durations(log):
    """``{nodeid: seconds}`` (setup + call + teardown) from pytest's ``--durations=0`` lines, and the summary line."""
    out = collections.defaultdict(float)
    summary = ""
    for line in pathlib.Path(log).read_text().splitlines():
        m = re.match(r"\s*([\d.]+)s (setup|call|teardown)\s+(\S.*)$", line)
        if m:
            out[m.group(3)] += float(m.group(1))
        elif re.search(r"\d+ passed", line):
            summary = line.strip("= ")
    return dict(out), summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("profile_dir")
    ap.add_argument("log")
    ap.add_argument("--out", default="benchmarks/results/test_suite.md")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    prof = load_profile(a.profile_dir)
    dur, summary = load_durations(a.log)
    # the profile's own wall times (every test) where the run recorded them; the log's --durations otherwise
    dur.update({nodeid: r["wall"] for nodeid, r in prof.items() if "wall" in r})
    total_compile = sum(r["compile"] for r in prof.values())
    total_trace = sum(r["trace"] + r["lower"] for r in prof.values())
    lines = [
        "# Where the test suite's time goes",
        "",
        f"{datetime.date.today().isoformat()}, {a.label}: `{summary}`.  Summed over workers: "
        f"{sum(dur.values()):.0f} s of test time, {total_compile:.0f} s of XLA compilation, {total_trace:.0f} s "
        "of tracing and lowering.  (`benchmarks/suite_profile.py`; the suite run with `JAXDP_TEST_PROFILE`.)",
        "",
        "## The 25 slowest tests",
        "",
        "| test | wall s | compile s | trace + lower s | programs compiled |",
        "|---|---|---|---|---|",
    ]
    for nodeid, sec in sorted(dur.items(), key=lambda kv: -kv[1])[:25]:
        r = prof.get(nodeid, {"compile": 0.0, "trace": 0.0, "lower": 0.0, "programs": []})
        lines.append(
            f"| `{nodeid}` | {sec:.1f} | {r['compile']:.1f} | {r['trace'] + r['lower']:.1f} | {len(r['programs'])} |"
        )
    by_file = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for nodeid, sec in dur.items():
        f = nodeid.split("::")[0]
        by_file[f][0] += sec
    for nodeid, r in prof.items():
        f = nodeid.split("::")[0]
        by_file[f][1] += r["compile"]
        by_file[f][2] += len(r["programs"])
    lines += ["", "## Per file", "", "| file | wall s | compile s | programs |", "|---|---|---|---|"]
    for f, (w, c, n) in sorted(by_file.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"| `{f}` | {w:.0f} | {c:.0f} | {n} |")
    names = collections.defaultdict(lambda: [0, 0.0, set()])
    for nodeid, r in prof.items():
        for name, sec, *_ in r["programs"]:
            names[name][0] += 1
            names[name][1] += sec
            names[name][2].add(nodeid.split("::")[0])
    lines += [
        "",
        "## Programs by name (compiled more than 10 s in all)",
        "",
        "| program | compiles | compile s | files |",
        "|---|---|---|---|",
    ]
    for name, (n, sec, files) in sorted(names.items(), key=lambda kv: -kv[1][1]):
        if sec > 10:
            lines.append(f"| `{name}` | {n} | {sec:.0f} | {len(files)} |")
    pathlib.Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:40]))


if __name__ == "__main__":
    main()
