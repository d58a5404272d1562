"""The caller's OpenTelemetry context (traceparent, tracestate, baggage) in
call metadata, when the program has OpenTelemetry installed (the ``otel``
extra); nothing otherwise."""

from __future__ import annotations

from typing import Any

from ._conn import _md_pairs

_propagate: Any = None  # the opentelemetry.propagate module; False: not installed


def with_trace(md: Any) -> Any:
    """md with the current context added as the global propagator writes it
    (W3C trace context and baggage unless OTEL_PROPAGATORS says otherwise);
    md itself when OpenTelemetry is not installed or there is nothing to
    send. Keys md already has are left as they are."""
    global _propagate
    if _propagate is None:
        try:
            from opentelemetry import propagate

            _propagate = propagate
        except ImportError:
            _propagate = False
    if _propagate is False:
        return md
    carrier: dict[str, str] = {}
    _propagate.inject(carrier)
    if not carrier:
        return md
    pairs = _md_pairs(md)
    have = {k for k, _ in pairs}
    return pairs + [(k, v) for k, v in carrier.items() if k not in have]
