"""Runs the Python examples of README.md (and of the repository's README) as
written: those on the "default" address against `warren serve` started
without --addr, those naming the test server's address against
clients/testserver there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Server

README = Path(__file__).resolve().parents[1] / "README.md"
ROOT_README = Path(__file__).resolve().parents[3] / "README.md"
# This package's README, and the Python section of the repository's.
EXAMPLES = re.findall(r"```python\n(.*?)```", README.read_text(), re.S) + re.findall(
    r"```python\n(.*?)```", ROOT_README.read_text().partition("\n## Python\n")[2].partition("\n## ")[0], re.S
)
TEST_SERVER = "unix:///tmp/warren-test.sock"
# The repository's README names an address of its own.
OTHER = "unix:///run/app/app.sock"


def test_readme_has_examples():
    assert len(EXAMPLES) >= 6
    for ex in EXAMPLES:
        assert sum(a in ex for a in ('"default"', TEST_SERVER, OTHER)) == 1, ex


@pytest.mark.parametrize("i", range(len(EXAMPLES)))
def test_readme_example(i, warren_serve, server_bin, tmp_path):
    code = EXAMPLES[i]
    # The generated code of the counter service and the test schema.
    gen = str(README.parent / "gen")
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path), "PYTHONPATH": os.pathsep.join(filter(None, [gen, os.environ.get("PYTHONPATH")]))}
    srv = None
    if TEST_SERVER in code:
        # The address the README names is replaced by a private one.
        srv = Server(server_bin, f"unix://{tmp_path}/test.sock")
        code = code.replace(TEST_SERVER, srv.address)
    else:
        served = warren_serve(env={"XDG_RUNTIME_DIR": str(tmp_path)})
        code = code.replace(OTHER, served.address)
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    finally:
        if srv is not None:
            srv.stop()
    assert r.returncode == 0, r.stderr
    # The outputs the comments announce.
    for line in EXAMPLES[i].splitlines():
        m = re.search(r"print\(.*\)\s+# (.+)$", line)
        if m and "..." not in m.group(1) and "whatever" not in m.group(1):
            assert m.group(1) in r.stdout, (m.group(1), r.stdout)
