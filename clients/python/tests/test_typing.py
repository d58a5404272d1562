"""The package is typed: mypy --strict accepts it and a program using its
public API, and catches that program's deliberate mistakes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src" / "warren"
USAGE = HERE / "typed_usage.py"
GEN = HERE.parent / "gen"
GENERATED_USAGE = HERE / "typed_generated.py"


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str]:
    """mypy --strict over the package and the usage program, in one run."""
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.fail("the typing tests need mypy: pip install './clients/python[test]'")
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--show-absolute-path",
         "--cache-dir", str(tmp_path_factory.mktemp("mypy")), str(SRC), str(USAGE), str(GENERATED_USAGE),
         *map(str, sorted(GEN.glob("*_warren.py")))],
        capture_output=True, text=True, timeout=300, env={**os.environ, "MYPYPATH": str(GEN)},
    )
    assert r.returncode in (0, 1), r.stdout + r.stderr  # 1: errors found, 2: mypy failed
    return r.returncode, r.stdout


def errors(out: str, path: Path) -> set[tuple[int, str]]:
    """(line, code) of each error mypy reported in path."""
    pat = re.escape(str(path)) + r":(\d+): error: .*\[([\w-]+)\]$"
    return {(int(m.group(1)), m.group(2)) for m in re.finditer(pat, out, re.M)}


def test_package_is_strictly_typed(mypy_output):
    out = mypy_output[1]
    assert not [line for line in out.splitlines() if line.startswith(str(SRC))], out


def test_generated_code_is_strictly_typed(mypy_output):
    out = mypy_output[1]
    assert sorted(GEN.glob("*_warren.py")) and not [line for line in out.splitlines() if line.startswith(str(GEN))], out


@pytest.mark.parametrize("usage", [USAGE, GENERATED_USAGE], ids=["client", "generated"])
def test_typed_usage(mypy_output, usage):
    """Each line marked ``# E: code`` is an error mypy reports, with that
    code; nothing else is."""
    want = {
        (i, m.group(1))
        for i, line in enumerate(usage.read_text().splitlines(), 1)
        if (m := re.search(r"# E: ([\w-]+)$", line))
    }
    assert want and errors(mypy_output[1], usage) == want, mypy_output[1]
