"""Runs the Python examples of README.md against the Go test server."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
ROOT_README = Path(__file__).resolve().parents[3] / "README.md"
# This package's README, and the Python section of the repository's.
EXAMPLES = re.findall(r"```python\n(.*?)```", README.read_text(), re.S) + re.findall(
    r"```python\n(.*?)```", ROOT_README.read_text().partition("\n## Python\n")[2].partition("\n## ")[0], re.S
)
PLACEHOLDER = "unix:///run/app/app.sock"


def test_readme_has_examples():
    assert len(EXAMPLES) >= 6
    assert all(PLACEHOLDER in ex for ex in EXAMPLES)


@pytest.mark.parametrize("i", range(len(EXAMPLES)))
def test_readme_example(i, start_server):
    srv = start_server("unix")
    code = EXAMPLES[i].replace(PLACEHOLDER, srv.address)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # The outputs the comments announce.
    for line in EXAMPLES[i].splitlines():
        m = re.search(r"print\(.*\)\s+# (.+)$", line)
        if m and "..." not in m.group(1) and "whatever" not in m.group(1):
            assert m.group(1) in r.stdout, (m.group(1), r.stdout)
