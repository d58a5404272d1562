"""The shared test vectors (testdata/vectors.json, the file the Go tests
read), decoded and re-encoded byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from warren import _wire as w

VECTORS_PATH = Path(__file__).resolve().parents[3] / "testdata" / "vectors.json"
VECTORS = json.loads(VECTORS_PATH.read_text())


def md(pairs):
    return [tuple(p) for p in pairs or []]


def check(v):
    b = bytes.fromhex(v["hex"])
    f = v["fields"]
    kind = v["kind"]
    if kind == "frame":
        fr, n = w.parse_frame(b)
        assert (fr.length, fr.stream, fr.type, fr.flags, fr.payload.hex()) == (
            f["length"], f["stream"], f["type_id"], f["flags"], f["payload"])
        assert w.TYPE_NAMES[fr.type] == f["type"]
        assert n == len(b)
        return w.encode_frame(fr.stream, fr.type, fr.flags, fr.payload)
    if kind == "preface":
        r = w.parse_preface(b)
        if r is None:
            raise w.WireError("incomplete", "preface needs more bytes")
        s, n = r
        assert (s.max_frame_size, s.max_message_size, s.initial_window, s.max_streams, n) == (
            f["max_frame_size"], f["max_message_size"], f["initial_window"], f["max_streams"], f["size"])
        assert f["version"] == w.VERSION
        return w.encode_preface(s)
    if kind == "callheader":
        h = w.decode_call_header(b)
        assert (h.method, h.codec, h.timeout_us, h.metadata) == (
            f["method"], f["codec"], f["timeout_us"], md(f["metadata"]))
        return w.encode_call_header(h.method, h.codec, h.timeout_us, h.metadata)
    if kind == "trailer":
        t = w.decode_trailer(b)
        assert (t.code, t.message, [d.hex() for d in t.details], t.metadata) == (
            f["code"], f["message"], f["details"] or [], md(f["metadata"]))
        return w.encode_trailer(t.code, t.message, t.details, t.metadata)
    if kind == "metadata":
        m = w.decode_metadata(b)
        assert m == md(f["metadata"])
        return bytes(w.encode_metadata(m))
    if kind == "window":
        inc = w.decode_window(b)
        assert inc == f["increment"]
        return w.encode_window(inc)
    if kind == "goaway":
        last, code, msg = w.decode_goaway(b)
        assert (last, code, msg) == (f["last_stream"], f["code"], f["message"])
        return w.encode_goaway(last, code, msg)
    if kind == "message":
        msg, last, frames = w.decode_message(b)
        assert msg.hex() == f["message"]
        assert (last.stream, w.TYPE_NAMES[last.type], last.flags, frames) == (
            f["stream"], f["type"], f["flags"], f["frames"])
        return b"".join(w.encode_message(last.stream, msg, f["max_frame"], end=bool(last.flags & w.FLAG_END)))
    raise AssertionError(f"unknown kind {kind}")


def test_vectors_file_is_complete():
    kinds = {v["kind"] for v in VECTORS}
    assert kinds == {"frame", "preface", "callheader", "trailer", "metadata", "window", "goaway", "message"}
    assert len(VECTORS) >= 100


@pytest.mark.parametrize("v", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector(v):
    if v["error"]:
        with pytest.raises(w.WireError) as ei:
            check(v)
        assert ei.value.kind == v["error"], str(ei.value)
        return
    out = check(v)
    if not v.get("noncanonical"):
        assert out.hex() == v["hex"]


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 2**32, 2**64 - 1])
def test_uvarint_round_trip(n):
    b = bytearray()
    w.put_uvarint(b, n)
    assert w.get_uvarint(bytes(b), 0) == (n, len(b))


def test_uvarint_overflow_and_non_minimal():
    with pytest.raises(w.WireError):
        w.get_uvarint(b"\xff" * 10 + b"\x01", 0)
    with pytest.raises(w.WireError):
        w.get_uvarint(b"\xff" * 9 + b"\x02", 0)
    assert w.get_uvarint(b"\x81\x00", 0) == (1, 2)  # non-minimal is accepted
