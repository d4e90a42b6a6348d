"""One runner for the benchmarks: ``python -m benchmarks`` lists them, ``python -m benchmarks NAME [options]`` runs
``benchmarks/bench_NAME.py`` (or ``benchmarks/NAME.py``) with those options, in this process.

Every results file under ``benchmarks/results`` the run writes gets a provenance line under its title (commit,
whether the tree was clean, JAX and jaxlib, backend and devices, CPU cores, Python, date: ``_timing.provenance``),
replacing an older one, so that no table is read without knowing where it came from.
"""

from __future__ import annotations

import ast
import pathlib
import runpy
import sys

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "results"
MARK = "> Provenance:"


def scripts() -> dict[str, pathlib.Path]:
    """``{name: path}`` of every runnable script (``bench_*.py`` under its short name, and the other tools)."""
    out = {}
    for path in sorted(HERE.glob("*.py")):
        if path.name.startswith("_"):
            continue
        out[path.stem.removeprefix("bench_")] = path
    return out


def summary(path: pathlib.Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return doc.split("\n\n")[0].replace("\n", " ")


def stamp(path: pathlib.Path, line: str) -> None:
    """Puts ``line`` under the title of the Markdown file ``path`` (replacing an earlier provenance line)."""
    text = path.read_text().splitlines()
    text = [t for t in text if not t.startswith(MARK)]
    at = 1 if text and text[0].startswith("#") else 0
    text[at:at] = ["", line] if at else [line]
    path.write_text("\n".join(text) + "\n")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    table = scripts()
    if not argv or argv[0] in ("-h", "--help", "list"):
        width = max(map(len, table))
        print("python -m benchmarks NAME [options]   (NAME --help: the script's own options)\n")
        for name, path in table.items():
            print(f"  {name:<{width}}  {summary(path)[:100]}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in table:
        print(f"unknown benchmark {name!r}; one of: {', '.join(table)}", file=sys.stderr)
        return 2
    sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
    from _timing import provenance

    line = f"{MARK} {provenance()}"
    print(line, file=sys.stderr)
    before = {p: p.stat().st_mtime for p in RESULTS.glob("*.md")}
    sys.argv = [str(table[name]), *rest]
    try:
        runpy.run_path(str(table[name]), run_name="__main__")
    except SystemExit as done:
        if done.code not in (None, 0):
            return int(done.code) if isinstance(done.code, int) else 1
    for path in RESULTS.glob("*.md"):
        if before.get(path) != path.stat().st_mtime:
            stamp(path, line)
            print(f"stamped {path.relative_to(HERE.parent)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
