"""The bytes of warren's wire protocol (PROTOCOL.md), version 1.

Pure functions that encode and decode prefaces, frame headers and payloads,
checked byte for byte against testdata/vectors.json. Decoders raise
:class:`WireError`, whose ``kind`` is one of the vectors' error classes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterator, Sequence

MAGIC = b"\xf0WRN"
VERSION = 1
MAX_SETTINGS = 16

# Frame types.
HEADERS = 0x1
DATA = 0x2
TRAILERS = 0x3
CANCEL = 0x4
WINDOW = 0x5
PING = 0x6
GOAWAY = 0x7

TYPE_NAMES = {
    HEADERS: "HEADERS",
    DATA: "DATA",
    TRAILERS: "TRAILERS",
    CANCEL: "CANCEL",
    WINDOW: "WINDOW",
    PING: "PING",
    GOAWAY: "GOAWAY",
}

# Flags.
FLAG_MORE = 0x01
FLAG_END = 0x02
FLAG_ACK = 0x04

HEADER_SIZE = 10

# Settings ids, defaults and bounds.
SETTING_MAX_FRAME_SIZE = 1
SETTING_MAX_MESSAGE_SIZE = 2
SETTING_INITIAL_WINDOW = 3
SETTING_MAX_STREAMS = 4
SETTING_MODE = 16

DEFAULT_MAX_FRAME_SIZE = 64 << 10
DEFAULT_MAX_MESSAGE_SIZE = 4 << 20
DEFAULT_INITIAL_WINDOW = 1 << 20
DEFAULT_MAX_STREAMS = 1024

MAX_WINDOW = (1 << 31) - 1

_HTTP_METHODS = (b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"OPTI", b"PATC", b"CONN", b"TRAC", b"PRI ")

_header = struct.Struct(">IIBB")
_u32 = struct.Struct(">I")


class WireError(Exception):
    """Bytes that break the protocol. ``kind`` names the class of error:
    frame_too_large, bad_frame, bad_payload, message_too_large, not_warren,
    http_request, bad_version, bad_preface, bad_setting or incomplete."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class Settings:
    """The limits one side announces in its preface: what it accepts.

    ``mode`` is the Mode setting of plain message streams (1); a session
    records it and otherwise ignores it, like any setting it does not know.
    """

    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    initial_window: int = DEFAULT_INITIAL_WINDOW
    max_streams: int = DEFAULT_MAX_STREAMS
    mode: int = 0

    def validate(self) -> None:
        """Raises WireError (bad_setting) when a value is out of its range."""
        checks = (
            ("MaxFrameSize", self.max_frame_size, 1024, 16 << 20),
            ("MaxMessageSize", self.max_message_size, 1, 1 << 30),
            ("InitialWindow", self.initial_window, 1024, MAX_WINDOW),
            ("MaxStreams", self.max_streams, 1, MAX_WINDOW),
        )
        for name, v, lo, hi in checks:
            if not lo <= v <= hi:
                raise WireError("bad_setting", f"setting {name} = {v} is outside {lo}..{hi}")


def encode_preface(s: Settings | None = None) -> bytes:
    """The preface announcing s, leaving out settings at their defaults."""
    s = s or Settings()
    out = bytearray(MAGIC)
    out += bytes((VERSION, 0))
    for sid, v, d in (
        (SETTING_MAX_FRAME_SIZE, s.max_frame_size, DEFAULT_MAX_FRAME_SIZE),
        (SETTING_MAX_MESSAGE_SIZE, s.max_message_size, DEFAULT_MAX_MESSAGE_SIZE),
        (SETTING_INITIAL_WINDOW, s.initial_window, DEFAULT_INITIAL_WINDOW),
        (SETTING_MAX_STREAMS, s.max_streams, DEFAULT_MAX_STREAMS),
        (SETTING_MODE, s.mode, 0),
    ):
        if v != d:
            out += struct.pack(">HI", sid, v)
            out[5] += 1
    return bytes(out)


def looks_like_http(b: bytes) -> bool:
    return bytes(b[:4]) in _HTTP_METHODS


def parse_preface(b: bytes | bytearray | memoryview) -> tuple[Settings, int] | None:
    """Decodes a preface from the start of b: its settings and its size, or
    None when b does not hold all of it yet. Fails as soon as the bytes prove
    they are not a warren preface."""
    b = bytes(b[: 6 + MAX_SETTINGS * 6])
    m = min(len(b), 4)
    if b[:m] != MAGIC[:m]:
        if m < 4 and any(h.startswith(b[:m]) for h in _HTTP_METHODS):
            return None
        if looks_like_http(b):
            raise WireError("http_request", "the peer speaks HTTP, not warren")
        raise WireError("not_warren", f"the peer does not speak warren (it sent {b[:6].hex()})")
    if len(b) > 4 and b[4] != VERSION:
        raise WireError("bad_version", f"unsupported protocol version {b[4]} (this side speaks {VERSION})")
    if len(b) < 6:
        return None
    count = b[5]
    if count > MAX_SETTINGS:
        raise WireError("bad_preface", f"{count} settings in the preface, at most {MAX_SETTINGS} allowed")
    n = 6 + count * 6
    if len(b) < n:
        return None
    s = Settings()
    for i in range(6, n, 6):
        sid, v = struct.unpack_from(">HI", b, i)
        if sid == SETTING_MAX_FRAME_SIZE:
            s.max_frame_size = v
        elif sid == SETTING_MAX_MESSAGE_SIZE:
            s.max_message_size = v
        elif sid == SETTING_INITIAL_WINDOW:
            s.initial_window = v
        elif sid == SETTING_MAX_STREAMS:
            s.max_streams = v
        elif sid == SETTING_MODE:
            s.mode = v
    s.validate()
    return s, n


# Frames.


def frame_header(length: int, stream: int, ftype: int, flags: int) -> bytes:
    return _header.pack(length, stream, ftype, flags)


def encode_frame(stream: int, ftype: int, flags: int, payload: bytes = b"") -> bytes:
    return _header.pack(len(payload), stream, ftype, flags) + payload


def check_header(length: int, stream: int, ftype: int, flags: int, max_frame: int) -> None:
    """Validates a frame header before its payload is read (PROTOCOL.md,
    Frames)."""
    if length > max_frame:
        raise WireError("frame_too_large", f"frame payload of {length} bytes is over MaxFrameSize {max_frame}")
    if ftype < HEADERS or ftype > GOAWAY:
        raise WireError("bad_frame", f"unknown frame type {ftype:#x}")
    if ftype <= CANCEL:
        if stream == 0:
            raise WireError("bad_frame", f"{TYPE_NAMES[ftype]} frame on stream 0")
        if flags & FLAG_MORE and ftype != DATA:
            raise WireError("bad_frame", f"{TYPE_NAMES[ftype]} frame with MORE")
        if ftype == DATA and flags & FLAG_MORE and flags & FLAG_END:
            raise WireError("bad_frame", "DATA frame with both MORE and END")
    elif ftype == WINDOW:
        if length != 4:
            raise WireError("bad_frame", f"WINDOW payload of {length} bytes, not 4")
    else:
        if stream != 0:
            raise WireError("bad_frame", f"{TYPE_NAMES[ftype]} frame on stream {stream}")
        if ftype == PING and length != 8:
            raise WireError("bad_frame", f"PING payload of {length} bytes, not 8")


@dataclass
class Frame:
    length: int
    stream: int
    type: int
    flags: int
    payload: bytes


def parse_frame(b: bytes, max_frame: int = DEFAULT_MAX_FRAME_SIZE) -> tuple[Frame, int]:
    """Decodes one whole frame from the start of b and its size."""
    if len(b) < HEADER_SIZE:
        raise WireError("incomplete", "truncated frame header")
    length, stream, ftype, flags = _header.unpack_from(b)
    check_header(length, stream, ftype, flags, max_frame)
    if len(b) < HEADER_SIZE + length:
        raise WireError("incomplete", "frame payload past the end of the input")
    return Frame(length, stream, ftype, flags, bytes(b[HEADER_SIZE : HEADER_SIZE + length])), HEADER_SIZE + length


# Varints and byte strings.


def put_uvarint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def get_uvarint(b: bytes, i: int) -> tuple[int, int]:
    """Decodes a uvarint at b[i:]: its value and the index after it."""
    v = 0
    shift = 0
    n = len(b)
    for k in range(10):
        if i >= n:
            raise WireError("bad_payload", "truncated uvarint")
        c = b[i]
        i += 1
        if k == 9 and c > 1:
            raise WireError("bad_payload", "uvarint overflows 64 bits")
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, i
        shift += 7
    raise WireError("bad_payload", "uvarint overflows 64 bits")


def get_bytes(b: bytes, i: int) -> tuple[bytes, int]:
    n, i = get_uvarint(b, i)
    if n > len(b) - i:
        raise WireError("bad_payload", f"length {n} past the end of the payload")
    return bytes(b[i : i + n]), i + n


def put_bytes(out: bytearray, v: bytes) -> None:
    put_uvarint(out, len(v))
    out += v


# Metadata: uvarint count | count x (bytes key | bytes value).

Pairs = list[tuple[str, str]]


def encode_metadata(pairs: Sequence[tuple[str | bytes, str | bytes]] | None, out: bytearray | None = None) -> bytearray:
    out = bytearray() if out is None else out
    if not pairs:
        return out
    put_uvarint(out, len(pairs))
    for k, v in pairs:
        put_bytes(out, k.encode() if isinstance(k, str) else k)
        put_bytes(out, v.encode() if isinstance(v, str) else v)
    return out


def decode_metadata(b: bytes, i: int = 0) -> Pairs:
    """Decodes a metadata block running from b[i:] to the end of b."""
    if i >= len(b):
        return []
    count, i = get_uvarint(b, i)
    if count > (len(b) - i) // 2:
        raise WireError("bad_payload", f"metadata count {count} past the end of the block")
    out: Pairs = []
    for _ in range(count):
        k, i = get_bytes(b, i)
        v, i = get_bytes(b, i)
        out.append((_text(k), _text(v)))
    if i != len(b):
        raise WireError("bad_payload", f"{len(b) - i} bytes after the metadata block")
    return out


def _text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


# Call header: bytes method | u8 codec | uvarint timeout | metadata block.


@dataclass
class CallHeader:
    method: str
    codec: int
    timeout_us: int = 0
    metadata: Pairs = field(default_factory=list)


def encode_call_header(method: str, codec: int, timeout_us: int = 0, metadata: Sequence[tuple[str, str]] | None = None) -> bytes:
    out = bytearray()
    put_bytes(out, method.encode())
    out.append(codec)
    put_uvarint(out, timeout_us)
    encode_metadata(metadata, out)
    return bytes(out)


def decode_call_header(b: bytes) -> CallHeader:
    m, i = get_bytes(b, 0)
    if not m:
        raise WireError("bad_payload", "empty method name")
    if i >= len(b):
        raise WireError("bad_payload", "call header without a codec")
    codec = b[i]
    timeout, i = get_uvarint(b, i + 1)
    return CallHeader(_text(m), codec, timeout, decode_metadata(b, i))


# Trailers: uvarint code | bytes message | details block | metadata block.


@dataclass
class Trailer:
    code: int = 0
    message: str = ""
    details: list[bytes] = field(default_factory=list)
    metadata: Pairs = field(default_factory=list)


def encode_trailer(code: int, message: str = "", details: Sequence[bytes] = (), metadata: Sequence[tuple[str, str]] | None = None) -> bytes:
    out = bytearray()
    if code == 0 and not message and not details and not metadata:
        return b""
    put_uvarint(out, code)
    put_bytes(out, message.encode())
    if details or metadata:
        put_uvarint(out, len(details))
        for d in details:
            put_bytes(out, d)
    encode_metadata(metadata, out)
    return bytes(out)


def decode_trailer(b: bytes) -> Trailer:
    t = Trailer()
    if not b:
        return t
    t.code, i = get_uvarint(b, 0)
    if t.code > 0xFFFFFFFF:
        raise WireError("bad_payload", f"status code {t.code} does not fit in 32 bits")
    m, i = get_bytes(b, i)
    t.message = _text(m)
    if i < len(b):
        count, i = get_uvarint(b, i)
        if count > len(b) - i:
            raise WireError("bad_payload", f"details count {count} past the end of the payload")
        for _ in range(count):
            d, i = get_bytes(b, i)
            t.details.append(d)
        t.metadata = decode_metadata(b, i)
    return t


# WINDOW and GOAWAY payloads.


def encode_window(increment: int) -> bytes:
    return _u32.pack(increment)


def decode_window(b: bytes) -> int:
    if len(b) != 4:
        raise WireError("bad_payload", f"WINDOW payload of {len(b)} bytes, not 4")
    v: int = _u32.unpack(b)[0]
    if not 1 <= v <= MAX_WINDOW:
        raise WireError("bad_payload", f"WINDOW increment {v} outside 1..{MAX_WINDOW}")
    return v


def encode_goaway(last_stream: int, code: int, message: str = "") -> bytes:
    out = bytearray(_u32.pack(last_stream))
    put_uvarint(out, code)
    out += message.encode()
    return bytes(out)


def decode_goaway(b: bytes) -> tuple[int, int, str]:
    if len(b) < 5:
        raise WireError("bad_payload", f"GOAWAY payload of {len(b)} bytes is too short")
    last = _u32.unpack_from(b)[0]
    code, i = get_uvarint(b, 4)
    return last, code, _text(b[i:])


# Messages and chunking.


def encode_message(stream: int, msg: bytes, max_frame: int, end: bool = False) -> Iterator[bytes]:
    """The DATA frames carrying msg to a receiver whose MaxFrameSize is
    max_frame: one frame when it fits, else a chunked sequence."""
    n = len(msg)
    endf = FLAG_END if end else 0
    if n <= max_frame:
        yield _header.pack(n, stream, DATA, endf) + msg
        return
    first = max_frame - 4
    yield _header.pack(max_frame, stream, DATA, FLAG_MORE) + _u32.pack(n) + msg[:first]
    i = first
    while i < n:
        j = min(n, i + max_frame)
        yield _header.pack(j - i, stream, DATA, FLAG_MORE if j < n else endf) + msg[i:j]
        i = j


def decode_message(b: bytes, max_frame: int = DEFAULT_MAX_FRAME_SIZE, max_message: int = DEFAULT_MAX_MESSAGE_SIZE) -> tuple[bytes, Frame, int]:
    """Reassembles the message whose DATA frames start b: the message, its
    last frame and the number of frames."""
    i = 0
    f, n = parse_frame(b, max_frame)
    i += n
    if f.type != DATA:
        raise WireError("bad_frame", f"{TYPE_NAMES[f.type]} frame where a message was expected")
    if not f.flags & FLAG_MORE:
        if len(f.payload) > max_message:
            raise WireError("message_too_large", "message over MaxMessageSize")
        return f.payload, f, 1
    if len(f.payload) < 4:
        raise WireError("bad_frame", "first chunk shorter than its 4-byte length")
    total = _u32.unpack_from(f.payload)[0]
    if total > max_message:
        raise WireError("message_too_large", f"message of {total} bytes over MaxMessageSize {max_message}")
    buf = bytearray(f.payload[4:])
    if total <= len(buf):
        raise WireError("bad_frame", f"chunked message of {total} bytes not longer than its first chunk")
    frames = 1
    while True:
        g, n = parse_frame(b[i:], max_frame)
        i += n
        frames += 1
        if g.stream != f.stream or g.type != DATA:
            raise WireError("bad_frame", f"{TYPE_NAMES[g.type]} frame inside a chunked message")
        if not g.payload:
            raise WireError("bad_frame", "empty continuation frame")
        if len(buf) + len(g.payload) > total:
            raise WireError("bad_frame", "chunks past the declared message length")
        buf += g.payload
        done = len(buf) == total
        if g.flags & FLAG_MORE:
            if done:
                raise WireError("bad_frame", "MORE on the frame completing the message")
            continue
        if not done:
            raise WireError("bad_frame", "last chunk short of the declared message length")
        return bytes(buf), g, frames
