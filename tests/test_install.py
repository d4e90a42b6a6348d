"""The package as a user gets it: the wheel ``pip`` builds, and the installed ``jaxdp`` console script.

``python -m pytest`` imports ``./jaxdp`` from the checkout, so the rest of the suite never sees what
``pip install .`` puts in place: the wheel's file list (``[tool.setuptools.packages.find]``) and the
``[project.scripts]`` entry point.  The wheel is built from a copy of the working tree (the build writes
``build/`` and ``*.egg-info`` beside the sources); the console script is the one installed beside the running
interpreter, run from a directory outside the checkout.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest
import reference_values as ref

ROOT = pathlib.Path(__file__).resolve().parents[1]
# the working tree's files that are no part of the sources: never copied for the build
_NOT_SOURCES = (".venv", ".git", "__pycache__", "build", "dist", "*.egg-info", ".pytest_cache", ".ruff_cache")
_NOT_SOURCES += (".hypothesis",)


def _console_script():
    """The ``jaxdp`` script of this environment: beside ``sys.executable`` (a virtual environment's ``bin``),
    else on ``PATH``; ``None`` where it is not installed (a source checkout run without ``pip install``)."""
    exe = pathlib.Path(sys.executable).parent / ("jaxdp.exe" if os.name == "nt" else "jaxdp")
    if exe.is_file():
        return str(exe)
    return shutil.which("jaxdp")


def _run_script(args, cwd):
    script = _console_script()
    if script is None:
        pytest.skip("the jaxdp console script is not installed (pip install -e '.[dev]' puts it in place)")
    # the children read the test suite's compilation cache from JAX_COMPILATION_CACHE_DIR (tests/conftest.py)
    out = subprocess.run([script, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """Builds the wheel (``pip wheel --no-deps``) from a copy of the working tree; the path to the ``.whl``."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*_NOT_SOURCES))
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", ".", "-w", str(tmp / "dist")]
    out = subprocess.run(cmd, cwd=src, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    (whl,) = (tmp / "dist").glob("jaxdp-*.whl")
    return whl


def test_wheel_holds_every_module_of_the_package_and_nothing_else(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = zf.read(meta).decode()
        entry = zf.read(meta.replace("METADATA", "entry_points.txt")).decode()
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "jaxdp").rglob("*.py") if "__pycache__" not in p.parts}
    assert len(modules) > 20
    missing = modules - names
    assert not missing, sorted(missing)
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"jaxdp", meta.split("/", 1)[0]}, tops  # no tests/, benchmarks/, examples/ or docs/
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # the console script, and the extras the README names
    assert "jaxdp = jaxdp.cli:main" in entry
    for extra in ("dev", "train", "plot", "examples"):
        assert f"Provides-Extra: {extra}" in metadata
    assert 'scikit-learn>=1.3; extra == "dev"' in metadata  # test_example_training.py runs in CI


def test_installed_console_script_lists_every_method(tmp_path):
    import jaxdp

    out = _run_script(["methods"], cwd=tmp_path)
    listed = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert listed == list(jaxdp.available_methods())


def test_installed_console_script_answers_the_readme_query(tmp_path):
    """The README's first query (mnist_1.1) with the cheapest accountant to compile: the RDP bound, between the
    reference table's true epsilon and dp_accounting's RDP value (jaxdp optimises over real orders)."""
    (row,) = [r for r in ref.ROWS if r["case"] == "mnist_1.1"]
    args = ["epsilon", "--sigma", repr(row["sigma"]), "--q", repr(row["q"]), "--steps", str(row["steps"])]
    out = json.loads(_run_script([*args, "--delta", repr(row["delta"]), "--method", "rdp", "--json"], cwd=tmp_path))
    assert out["method"] == "rdp" and out["certified"] is True
    assert row["epsilon"] < out["epsilon"] <= row["rdp"] * (1 + 1e-9)
