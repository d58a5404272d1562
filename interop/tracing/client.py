"""The Python client of the tracing test: calls Chain.Hop at ADDR within a
span of its own, exporting to the OTLP/HTTP ENDPOINT, and prints the trace
id."""

import sys

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import warren

addr, endpoint = sys.argv[1], sys.argv[2]
provider = TracerProvider(resource=Resource.create({"service.name": "python-client"}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint + "/v1/traces")))
with warren.connect_sync(addr) as c, provider.get_tracer("tracing-test").start_as_current_span("python-call") as span:
    reply = c.call("Chain.Hop", {})
    assert reply == {"path": "a,b"}, reply
    print(f"{span.get_span_context().trace_id:032x}")
provider.shutdown()
