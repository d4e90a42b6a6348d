"""The benchmark runner (``python -m benchmarks``): it lists every script and stamps results with provenance."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_lists_every_benchmark_script():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    names = {line.split()[0] for line in out.splitlines()[2:] if line.strip()}
    scripts = {p.stem.removeprefix("bench_") for p in (ROOT / "benchmarks").glob("*.py") if not p.stem.startswith("_")}
    assert names == scripts and "evr" in names


def test_stamp_puts_one_provenance_line_under_the_title(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.__main__ import MARK, stamp

    path = tmp_path / "r.md"
    path.write_text("# Title\n\n> Provenance: old\n| a |\n")
    stamp(path, f"{MARK} new")
    stamp(path, f"{MARK} newer")
    lines = path.read_text().splitlines()
    assert lines[0] == "# Title" and [t for t in lines if t.startswith(MARK)] == [f"{MARK} newer"]
    assert "| a |" in lines
