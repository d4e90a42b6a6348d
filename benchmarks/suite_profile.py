"""Where the default test suite's time goes: wall time per test and the XLA programs each test compiled.

Run the suite with ``JAXDP_TEST_PROFILE=DIR`` (``tests/conftest.py`` then writes, per xdist worker, the seconds
JAX spent tracing, lowering and compiling during each test, and the name and compile time of each program it
compiled, and every test's wall time; older profiles need ``--durations=0`` in the log) into a log, then::

    python benchmarks/suite_profile.py DIR LOG [--out benchmarks/results/test_suite.md] [--label "cold, 2 cores"]

It writes the 25 slowest tests (wall), the compile seconds per test file, and the programs compiled most often
under one name (the same maths traced into several programs), and, from the persistent-cache key of every program
a test compiled or loaded, which tests share programs and what each test's leaving the default run would save (its
programs that no other test uses), so that a change to the suite can be judged by the programs it adds.  From an
empty cache (``JAXDP_TEST_XLA_CACHE`` pointing at a new directory) the figures are the cold ones a new contributor
or CI meets.
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


def _sharing(prof, dur):
    """Which tests share programs (the persistent-cache keys the profile records per test), and what each test's
    leaving the default run would save: its own time without compilation, plus the programs no other test uses.  A
    test whose programs other tests also compile saves little: they go only together."""
    # an XLA program compiled for jaxdp's own program cache is known by that cache's key (tests/conftest.py): the
    # tests that cache served share it, whether from memory, from its files or through JAX's cache
    alias = {xla: ours for r in prof.values() for xla, ours in r.get("alias", [])}
    cost, users, keys_of = {}, collections.defaultdict(set), {}
    for nodeid, r in prof.items():
        for _, sec, *key in r["programs"]:
            if key and key[0]:
                k = alias.get(key[0], key[0])
                cost[k] = max(cost.get(k, 0.0), sec)
        # (the programs this test used, under one name each)
        keys_of[nodeid] = {alias.get(k, k) for kind in ("miss", "hit") for _, k in r.get(kind, [])}
        keys_of[nodeid] |= set(r.get("jaxdp", []))
        for key in keys_of[nodeid]:
            users[key].add(nodeid)
    if not users:  # (a profile without keys: an older conftest)
        return []
    misses = collections.Counter(alias.get(key, key) for r in prof.values() for _, key in r.get("miss", []))
    twice = sum(cost.get(key, 0.0) * (n - 1) for key, n in misses.items() if n > 1)
    out = [
        "",
        "## Shared programs and what leaving the default run would save",
        "",
        f"{len(cost)} distinct programs compiled, {sum(cost.values()):.0f} s if each were compiled once; "
        f"{twice:.0f} s went to compiling a program a second time (both workers at once).  Saving: the test's "
        "time less its compilation, plus the compilation of the programs no other test uses; shared: the "
        "compilation of programs other tests use too (they leave only with them).  A program that a later test "
        "of the same worker takes from JAX's in-memory jit cache is not seen (that cache logs nothing; jaxdp's own "
        "program cache is), so a saving is an upper bound: check a cut with a new cold run.",
        "",
        "| test | saving s | wall s | own programs s | shared programs s |",
        "|---|---|---|---|---|",
    ]
    rows = []
    for nodeid, r in prof.items():
        keys = keys_of[nodeid]
        own = sum(cost.get(k, 0.0) for k in keys if users[k] == {nodeid})
        shared = sum(cost.get(k, 0.0) for k in keys if users[k] != {nodeid})
        wall = dur.get(nodeid, r.get("wall", 0.0))
        rows.append((wall - r["compile"] + own, wall, own, shared, nodeid))
    for save, wall, own, shared, nodeid in sorted(rows, reverse=True)[:25]:
        out.append(f"| `{nodeid}` | {save:.1f} | {wall:.1f} | {own:.1f} | {shared:.1f} |")
    return out


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
    lines += _sharing(prof, dur)
    pathlib.Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:40]))


if __name__ == "__main__":
    main()
