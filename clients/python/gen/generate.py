"""Regenerates this directory from the counter service and the test schema:
protoc's Python and .pyi outputs and protoc-gen-warren-python's clients.

    pip install './clients/python[proto,gen]'
    python clients/python/gen/generate.py

protoc is grpcio-tools', the .pyi stubs mypy-protobuf's (clean under mypy
--strict), both at the versions the gen extra pins; the warren plugin is
the one installed with this package.
"""

from __future__ import annotations

import shutil
import sys
from importlib.resources import files
from pathlib import Path

from grpc_tools import protoc

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SOURCES = [ROOT / "examples/counter/counter.proto", ROOT / "testdata/proto/warren/test/v1/everything.proto"]


def plugin(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        sys.exit(f"{name} is not installed: pip install './clients/python[proto,gen]'")
    return path


def main() -> None:
    for f in HERE.iterdir():
        if f.name.endswith(("_pb2.py", "_pb2.pyi", "_warren.py")):
            f.unlink()
    args = ["protoc", f"--plugin=protoc-gen-warren-python={plugin('protoc-gen-warren-python')}", f"--plugin=protoc-gen-mypy={plugin('protoc-gen-mypy')}"]
    args += [f"-I{files('grpc_tools') / '_proto'}"]
    args += [f"-I{p.parent}" for p in SOURCES]
    args += [f"--python_out={HERE}", f"--mypy_out={HERE}", f"--warren-python_out={HERE}"]
    if protoc.main(args + [p.name for p in SOURCES]) != 0:
        sys.exit("protoc failed")


if __name__ == "__main__":
    main()
