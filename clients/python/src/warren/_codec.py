"""Codecs: how messages travel in DATA frames (PROTOCOL.md, Codecs)."""

from __future__ import annotations

import json
from typing import Any

RAW = 0
JSON = 1
PROTO = 2

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_loads = json.loads


class Codec:
    """Encodes requests and decodes replies of one call.

    ``id`` is the codec byte of the call header. Subclass it for other
    message types that travel as one of the three wire codecs."""

    id: int = RAW
    name: str = "raw"

    def encode(self, msg: Any) -> bytes:
        """The bytes of one request message."""
        raise NotImplementedError

    def decode(self, data: bytes) -> Any:
        """One reply message from its bytes."""
        raise NotImplementedError

    def decode_detail(self, data: bytes) -> Any:
        """One error detail of a failed call (StatusError.details); as
        sent unless the codec knows better."""
        return data


class RawCodec(Codec):
    """Bytes in, bytes out, unchanged."""

    id = RAW
    name = "raw"

    def encode(self, msg: Any) -> bytes:
        if isinstance(msg, bytes):
            return msg
        if isinstance(msg, (bytearray, memoryview)):
            return bytes(msg)
        raise TypeError(f"the raw codec sends bytes, not {type(msg).__name__}")

    def decode(self, data: bytes) -> bytes:
        return data


class JSONCodec(Codec):
    """JSON values (dicts, lists, strings, numbers...) as UTF-8 text."""

    id = JSON
    name = "json"

    def encode(self, msg: Any) -> bytes:
        return _dumps(msg).encode()

    def decode(self, data: bytes) -> Any:
        return _loads(data)

    def decode_detail(self, data: bytes) -> Any:
        try:
            return _loads(data)
        except ValueError:
            return data


class ProtoCodec(Codec):
    """Protocol Buffers messages (needs the ``protobuf`` package). Replies
    are decoded into ``response_type``; without one they stay bytes."""

    id = PROTO
    name = "proto"

    def __init__(self, response_type: Any = None) -> None:
        self.response_type = response_type

    def encode(self, msg: Any) -> bytes:
        if isinstance(msg, (bytes, bytearray, memoryview)):
            return bytes(msg)
        out: bytes = msg.SerializeToString()
        return out

    def decode(self, data: bytes) -> Any:
        if self.response_type is None:
            return data
        m = self.response_type()
        m.ParseFromString(data)
        return m


_RAW = RawCodec()
_JSON = JSONCodec()


def pick(codec: str | Codec | None, sample: Any, response_type: Any, default: str | Codec) -> Codec:
    """The codec of a call: the one named, else one inferred from the
    request (bytes: raw; a protobuf message or a response_type: proto), else
    the client's default."""
    if codec is None:
        if response_type is not None:
            return ProtoCodec(response_type)
        if isinstance(sample, (bytes, bytearray, memoryview)):
            return _RAW
        if hasattr(sample, "SerializeToString"):
            return ProtoCodec(None)
        codec = default
    if isinstance(codec, Codec):
        return codec
    if codec == "json":
        return _JSON
    if codec == "raw":
        return _RAW
    if codec in ("proto", "protobuf"):
        return ProtoCodec(response_type)
    raise ValueError(f"unknown codec {codec!r} (use 'json', 'raw', 'proto' or a warren.Codec)")
