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


def test_every_results_file_says_where_it_comes_from():
    """Each Markdown results file carries one provenance line under its title: the runner's stamp, or the label of
    a file written before the runner stamped results (which says so and names the commit that last changed it)."""
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.md")):
        lines = path.read_text().splitlines()
        marks = [i for i, line in enumerate(lines) if line.startswith("> Provenance:")]
        assert len(marks) >= 1 and marks[0] <= 3, path.name
