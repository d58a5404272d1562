"""The caller's OpenTelemetry context travels in call metadata (the otel
extra), and nothing is sent without it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

import warren
from warren import _otel

from conftest import Server
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import TracerProvider

tracer = TracerProvider().get_tracer("test")


@pytest.fixture(scope="module")
def addr(server_bin: Path, workdir: Path) -> Iterator[str]:
    srv = Server(server_bin, f"unix://{workdir}/otel.sock", None)
    try:
        yield srv.address
    finally:
        srv.stop()


def traceparent(span: trace.Span) -> str:
    sc = span.get_span_context()
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


@pytest.mark.asyncio
async def test_async(addr):
    async with warren.connect(addr) as c:
        with tracer.start_as_current_span("call") as span:
            token = context.attach(baggage.set_baggage("tenant", "acme"))
            try:
                md = (await c.call("Test.Metadata", {}, metadata={"k": "v"}))["metadata"]
            finally:
                context.detach(token)
        assert md == {"k": ["v"], "traceparent": [traceparent(span)], "baggage": ["tenant=acme"]}
        # Outside any span, nothing is added.
        assert (await c.call("Test.Metadata", {}))["metadata"] == {}


def test_sync(addr):
    with warren.connect_sync(addr) as c, tracer.start_as_current_span("call") as span:
        assert c.call("Test.Metadata", {})["metadata"] == {"traceparent": [traceparent(span)]}
        # A traceparent the caller gives is kept.
        mine = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
        assert c.call("Test.Metadata", {}, metadata={"traceparent": mine})["metadata"] == {"traceparent": [mine]}


def test_without_opentelemetry(addr, monkeypatch):
    """A program without OpenTelemetry sends nothing more."""
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import fails
    monkeypatch.setattr(_otel, "_propagate", None)
    with warren.connect_sync(addr) as c, tracer.start_as_current_span("call"):
        assert c.call("Test.Metadata", {})["metadata"] == {}
    assert _otel._propagate is False
