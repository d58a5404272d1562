"""Random and mutated input to every decoder and to a connection's reader:
nothing but WireError or ProtocolError ever comes out, and a connection that
fails is closed with its calls failed."""

from __future__ import annotations

import asyncio
import json
import random
import struct

import pytest

from test_vectors import VECTORS
from warren import _wire as w
from warren._conn import Connection
from warren._errors import ProtocolError, StatusError

SEEDS = [bytes.fromhex(v["hex"]) for v in VECTORS]


def mutate(rng: random.Random, b: bytes) -> bytes:
    b = bytearray(b)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(4)
        if op == 0 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 1:
            b.insert(rng.randint(0, len(b)), rng.randrange(256))
        elif op == 2 and b:
            del b[rng.randrange(len(b)) :]
        else:
            b += rng.randbytes(rng.randint(0, 8))
    return bytes(b)


DECODERS = [
    lambda b: w.parse_frame(b),
    lambda b: w.parse_preface(b),
    w.decode_call_header,
    w.decode_trailer,
    w.decode_metadata,
    w.decode_window,
    w.decode_goaway,
    lambda b: w.decode_message(b, 1024, 4096),
]


def test_decoders_fuzz():
    rng = random.Random(1)
    for _ in range(20000):
        b = mutate(rng, rng.choice(SEEDS)) if rng.random() < 0.9 else rng.randbytes(rng.randint(0, 40))
        for dec in DECODERS:
            try:
                dec(b)
            except w.WireError:
                pass


class FakeTransport:
    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False

    def write(self, b) -> None:
        self.out += b

    def get_write_buffer_size(self) -> int:
        return 0  # written at once

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, *a):
        return None


def valid_replies(sid: int) -> list[bytes]:
    f = w.encode_frame
    return [
        f(sid, w.HEADERS, 0, bytes(w.encode_metadata([("a", "b")]))),
        f(sid, w.DATA, 0, b'{"x":1}'),
        b"".join(w.encode_message(sid, bytes(range(200)), 64)),
        f(sid, w.TRAILERS, w.FLAG_END, w.encode_trailer(5, "nope", [b"d"], [("k", "v")])),
        f(0, w.PING, 0, b"12345678"),
        f(0, w.WINDOW, 0, struct.pack(">I", 100)),
        f(sid, w.WINDOW, 0, struct.pack(">I", 100)),
        f(0, w.GOAWAY, 0, w.encode_goaway(sid, 0, "bye")),
        f(2, w.HEADERS, 0, w.encode_call_header("C.M", 1)),
        f(sid, w.CANCEL, 0),
    ]


@pytest.mark.asyncio
async def test_connection_reader_fuzz():
    rng = random.Random(2)
    for i in range(3000):
        conn = Connection(max_frame_size=1024, initial_window=4096, max_message_size=4096)
        t = FakeTransport()
        conn.connection_made(t)
        conn.data_received(w.encode_preface(w.Settings(initial_window=1 << 16)))
        assert conn.ready.done() and conn.ready.exception() is None
        st = await conn.open_stream("A.B", 1, 0, None, b"{}", True)
        parts = valid_replies(st.id)
        rng.shuffle(parts)
        data = b"".join(parts[: rng.randint(1, len(parts))])
        if rng.random() < 0.8:
            data = mutate(rng, data)
        # Delivered in random pieces.
        while data:
            k = rng.randint(1, len(data))
            conn.data_received(data[:k])
            data = data[k:]
        if conn.closed:
            assert isinstance(conn.error, ProtocolError), conn.error
            assert t.closed
            # The call failed, or had ended before the bad bytes.
            assert st.closed and (isinstance(st.error, StatusError) or st.trailer is not None)
        conn.close()
        await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_ping_answers_go_ahead_of_queued_data():
    """PING answers are written before frames already queued, in the order
    the PINGs came; a burst of them costs linear time."""
    conn = Connection()
    t = FakeTransport()
    conn.connection_made(t)
    conn.data_received(w.encode_preface())
    sent = len(t.out)
    conn._write_frame(1, w.CANCEL, 0, b"")
    pings = b"".join(w.encode_frame(0, w.PING, 0, i.to_bytes(8, "big")) for i in range(3))
    conn.data_received(pings)
    conn._flush()
    acks = b"".join(w.encode_frame(0, w.PING, w.FLAG_ACK, i.to_bytes(8, "big")) for i in range(3))
    assert bytes(t.out[sent:]) == acks + w.encode_frame(1, w.CANCEL, 0)
