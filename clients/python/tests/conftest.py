"""Fixtures: the Go test server (clients/testserver), built once per session
and started per test module on each transport, and throwaway TLS certificates."""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    """A private directory for the binary, sockets and certificates; removed
    at the end of the session."""
    d = Path(tempfile.mkdtemp(prefix="warren-py-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _go_build(workdir: Path, pkg: str, name: str) -> Path:
    if shutil.which("go") is None:
        pytest.fail(f"the integration tests need the go command to build {pkg}")
    out = workdir / name
    subprocess.run(["go", "build", "-o", str(out), pkg], cwd=REPO, check=True)
    return out


@pytest.fixture(scope="session")
def server_bin(workdir: Path) -> Path:
    return _go_build(workdir, "./clients/testserver", "testserver")


@pytest.fixture(scope="session")
def warren_bin(workdir: Path) -> Path:
    """The warren command (cmd/warren), built once."""
    return _go_build(workdir, "./cmd/warren", "warren")


@pytest.fixture
def warren_serve(warren_bin: Path) -> Iterator:
    """Starts `warren serve ARGS...` (with env added to the environment);
    stops them at the end."""
    servers: list[Server] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Server:
        s = Server(warren_bin, "", args=[str(warren_bin), "serve", *args], env={**os.environ, **(env or {})})
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


@dataclass
class TLSFiles:
    ca: str
    cert: str
    key: str


@pytest.fixture(scope="session")
def tls_files(workdir: Path) -> TLSFiles:
    """A throwaway CA and a server certificate for localhost and 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "warren test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    d = workdir / "tls"
    d.mkdir()
    (d / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (d / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return TLSFiles(str(d / "ca.pem"), str(d / "cert.pem"), str(d / "key.pem"))


class Server:
    """A running clients/testserver."""

    def __init__(self, server_bin: Path, addr: str, tls: TLSFiles | None = None, *, args: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        if args is None:
            args = [str(server_bin), "-addr", addr, "-stdin"]
            if tls is not None:
                args += ["-cert", tls.cert, "-key", tls.key]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        self.output: list[str] = []
        for _ in range(20):
            line = self.proc.stdout.readline()
            self.output.append(line)
            if line.startswith("listening on ") or not line:
                break
        line = line.strip()
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"{args[0]} did not start: {''.join(self.output)!r}")
        self.address = line.removeprefix("listening on ")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._close_pipes()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._close_pipes()

    def _close_pipes(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()


TRANSPORTS = ["unix", "abstract", "tcp", "tls", "ws", "wss"]


def server_address(kind: str, workdir: Path) -> str:
    n = os.getpid()
    return {
        "unix": f"unix://{workdir}/s-{n}-{os.urandom(3).hex()}.sock",
        "abstract": f"unix:@warren-py-{n}-{os.urandom(4).hex()}",
        "tcp": "tcp://127.0.0.1:0",
        "tls": "tls://127.0.0.1:0",
        "ws": "ws://127.0.0.1:0/warren",
        "wss": "wss://127.0.0.1:0/warren",
    }[kind]


@dataclass
class Target:
    kind: str
    address: str
    options: dict
    server: Server


@pytest.fixture(scope="module", params=TRANSPORTS)
def target(request: pytest.FixtureRequest, server_bin: Path, workdir: Path, tls_files: TLSFiles) -> Iterator[Target]:
    """The test server on each transport, with the options to connect."""
    kind = request.param
    tls = tls_files if kind in ("tls", "wss") else None
    srv = Server(server_bin, server_address(kind, workdir), tls)
    opts: dict = {"max_message_size": 96 << 20}
    if tls is not None:
        opts["ca"] = tls.ca
    try:
        yield Target(kind, srv.address, opts, srv)
    finally:
        srv.stop()


@pytest.fixture
def start_server(server_bin: Path, workdir: Path) -> Iterator:
    """Starts servers that the test may kill; stops them at the end."""
    servers: list[Server] = []

    def start(kind: str = "unix") -> Server:
        s = Server(server_bin, server_address(kind, workdir))
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()
