"""The package is typed: mypy --strict accepts it and a program using its
public API, and catches that program's deliberate mistakes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src" / "warren"
USAGE = HERE / "typed_usage.py"


def mypy(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.fail("the typing tests need mypy: pip install './clients/python[test]'")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir", str(cache), *args],
        capture_output=True, text=True, timeout=300,
    )


def test_package_is_strictly_typed(tmp_path):
    r = mypy(str(SRC), cache=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_typed_usage(tmp_path):
    """Each line marked ``# E: code`` is an error mypy reports, with that
    code; nothing else is."""
    r = mypy(str(USAGE), cache=tmp_path)
    want = {
        (i, m.group(1))
        for i, line in enumerate(USAGE.read_text().splitlines(), 1)
        if (m := re.search(r"# E: ([\w-]+)$", line))
    }
    got = {(int(m.group(1)), m.group(2)) for m in re.finditer(r":(\d+): error: .*\[([\w-]+)\]$", r.stdout, re.M)}
    assert want and got == want, r.stdout
