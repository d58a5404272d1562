#!/usr/bin/env python3
"""A warren client written from PROTOCOL.md alone, to check that the
specification is enough to interoperate with the Go server.

    python3 testdata/speccheck.py [--vectors testdata/vectors.json]
                                  [--server-pid PID] SOCKET

It checks the test vectors (when given), then connects to a server running
clients/testserver on the Unix socket SOCKET and makes calls: unary, server
stream, a 3 MiB message each way, metadata, an unknown method, a unary call
with no and with two messages, DATA for a stream never opened, CANCEL,
PING, and GOAWAY from the client. With --server-pid it finally sends the
server SIGTERM during a call and checks its graceful shutdown (the server
exits). It prints one line per check and exits 1 on the first mismatch.

Python 3.11 standard library only.
"""

import argparse
import json
import os
import signal
import socket
import struct
import sys
import time

# --- Encoding (PROTOCOL.md: Conventions, Frames, Frame payloads) -----------

MAGIC = b"\xf0WRN"
VERSION = 1
HEADERS, DATA, TRAILERS, CANCEL, WINDOW, PING, GOAWAY = range(1, 8)
TYPE_NAMES = {1: "HEADERS", 2: "DATA", 3: "TRAILERS", 4: "CANCEL", 5: "WINDOW", 6: "PING", 7: "GOAWAY"}
MORE, END, ACK = 0x01, 0x02, 0x04
RAW, JSON = 0, 1

SETTINGS = {  # id: (name, default, min, max)
    1: ("max_frame_size", 65536, 1024, 16 << 20),
    2: ("max_message_size", 4 << 20, 1, 1 << 30),
    3: ("initial_window", 1 << 20, 1024, (1 << 31) - 1),
    4: ("max_streams", 1024, 1, (1 << 31) - 1),
}
HTTP_METHODS = [b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"OPTI", b"PATC", b"CONN", b"TRAC", b"PRI "]


class Fail(Exception):
    """A mismatch between the server (or a vector) and PROTOCOL.md."""


class DecodeError(Exception):
    def __init__(self, cls, why):
        super().__init__(f"{cls}: {why}")
        self.cls = cls


class Incomplete(Exception):
    pass


def uvarint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_uvarint(p, i, cls="bad_payload"):
    v = shift = 0
    while True:
        if i >= len(p):
            raise DecodeError(cls, "truncated uvarint")
        b = p[i]
        i += 1
        if shift == 63 and b > 1:
            raise DecodeError(cls, "uvarint overflows 64 bits")
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, i
        shift += 7
        if shift > 63:
            raise DecodeError(cls, "uvarint overflows 64 bits")


def read_bytes(p, i):
    n, i = read_uvarint(p, i)
    if n > len(p) - i:
        raise DecodeError("bad_payload", "length past the end")
    return bytes(p[i:i + n]), i + n


def enc_bytes(b):
    return uvarint(len(b)) + b


def enc_metadata(md):
    if not md:
        return b""
    return uvarint(len(md)) + b"".join(enc_bytes(k) + enc_bytes(v) for k, v in md)


def dec_metadata(p, i=0):
    if i == len(p):
        return []
    n, i = read_uvarint(p, i)
    out = []
    for _ in range(n):
        k, i = read_bytes(p, i)
        v, i = read_bytes(p, i)
        out.append((k, v))
    if i != len(p):
        raise DecodeError("bad_payload", "bytes after the metadata block")
    return out


def enc_preface(settings=None):
    out = bytearray(MAGIC + bytes([VERSION, 0]))
    for sid, (name, default, _, _) in SETTINGS.items():
        v = (settings or {}).get(name, default)
        if v != default:
            out += struct.pack(">HI", sid, v)
            out[5] += 1
    return bytes(out)


def dec_preface(b):
    """Returns (settings dict with defaults, size)."""
    if len(b) >= 1 and b[0] != MAGIC[0]:
        head = bytes(b[:4])
        if any(m.startswith(head) for m in HTTP_METHODS):
            if len(head) < 4:
                raise Incomplete()
            raise DecodeError("http_request", "an HTTP request")
        raise DecodeError("not_warren", "first byte is not 0xF0")
    for i in range(min(4, len(b))):
        if b[i] != MAGIC[i]:
            raise DecodeError("not_warren", "wrong magic")
    if len(b) < 5:
        raise Incomplete()
    if b[4] != VERSION:
        raise DecodeError("bad_version", f"version {b[4]}")
    if len(b) < 6:
        raise Incomplete()
    count = b[5]
    if count > 16:
        raise DecodeError("bad_preface", f"{count} settings")
    size = 6 + 6 * count
    if len(b) < size:
        raise Incomplete()
    out = {name: default for name, default, _, _ in SETTINGS.values()}
    for k in range(count):
        sid, v = struct.unpack_from(">HI", b, 6 + 6 * k)
        if sid in SETTINGS:
            out[SETTINGS[sid][0]] = v  # the last value wins
    for name, _, lo, hi in SETTINGS.values():  # only the values in effect are checked
        if not lo <= out[name] <= hi:
            raise DecodeError("bad_setting", f"{name} = {out[name]}")
    return out, size


def frame(stream, typ, flags, payload=b""):
    return struct.pack(">IIBB", len(payload), stream, typ, flags) + payload


def parse_frame(b, max_frame=65536):
    """Parses one frame from the start of b; returns (stream, type, flags,
    payload, size). Raises Incomplete or DecodeError."""
    if len(b) < 10:
        raise Incomplete()
    length, stream, typ, flags = struct.unpack_from(">IIBB", b)
    if length > max_frame:
        raise DecodeError("frame_too_large", f"payload of {length} bytes")
    if typ not in TYPE_NAMES:
        raise DecodeError("bad_frame", f"unknown type {typ}")
    if typ in (HEADERS, DATA, TRAILERS, CANCEL) and stream == 0:
        raise DecodeError("bad_frame", f"{TYPE_NAMES[typ]} on stream 0")
    if typ in (PING, GOAWAY) and stream != 0:
        raise DecodeError("bad_frame", f"{TYPE_NAMES[typ]} on stream {stream}")
    if typ == PING and length != 8 or typ == WINDOW and length != 4:
        raise DecodeError("bad_frame", f"{TYPE_NAMES[typ]} of {length} bytes")
    if typ in (HEADERS, TRAILERS) and flags & MORE:
        raise DecodeError("bad_frame", "MORE on HEADERS or TRAILERS")
    if len(b) < 10 + length:
        raise Incomplete()
    return stream, typ, flags, bytes(b[10:10 + length]), 10 + length


def enc_call_header(method, codec, timeout_us=0, md=None):
    return enc_bytes(method) + bytes([codec]) + uvarint(timeout_us) + enc_metadata(md)


def dec_call_header(p):
    method, i = read_bytes(p, 0)
    if not method:
        raise DecodeError("bad_payload", "empty method")
    if i >= len(p):
        raise DecodeError("bad_payload", "missing codec")
    codec = p[i]
    timeout, i = read_uvarint(p, i + 1)
    return method, codec, timeout, dec_metadata(p, i)


def enc_trailer(code, msg=b"", details=(), md=()):
    if code == 0 and not msg and not details and not md:
        return b""
    out = uvarint(code) + enc_bytes(msg)
    if not details and not md:
        return out
    return out + uvarint(len(details)) + b"".join(enc_bytes(d) for d in details) + enc_metadata(md)


def dec_trailer(p):
    if not p:
        return 0, b"", [], []
    code, i = read_uvarint(p, 0)
    if code >= 1 << 32:
        raise DecodeError("bad_payload", "code over 32 bits")
    msg, i = read_bytes(p, i)
    if i == len(p):
        return code, msg, [], []
    n, i = read_uvarint(p, i)
    details = []
    for _ in range(n):
        d, i = read_bytes(p, i)
        details.append(d)
    return code, msg, details, dec_metadata(p, i)


def dec_window(p):
    if len(p) != 4:
        raise DecodeError("bad_payload", "WINDOW payload not 4 bytes")
    v = struct.unpack(">I", p)[0]
    if not 1 <= v <= (1 << 31) - 1:
        raise DecodeError("bad_payload", f"increment {v}")
    return v


def dec_goaway(p):
    if len(p) < 4:
        raise DecodeError("bad_payload", "GOAWAY shorter than 4 bytes")
    last = struct.unpack_from(">I", p)[0]
    code, i = read_uvarint(p, 4)
    if code >= 1 << 32:
        raise DecodeError("bad_payload", "code over 32 bits")
    return last, code, bytes(p[i:])


class Assembler:
    """Puts a message back together from DATA frames (PROTOCOL.md: Messages
    and chunking)."""

    def __init__(self, limit=4 << 20):
        self.limit = limit
        self.buf = None
        self.total = 0

    def add(self, flags, payload):
        """Returns the message when complete, else None."""
        if flags & MORE and flags & END:
            raise DecodeError("bad_frame", "END with MORE")
        if self.buf is None:
            if not flags & MORE:
                if len(payload) > self.limit:
                    raise DecodeError("message_too_large", f"{len(payload)} bytes")
                return payload
            if len(payload) < 4:
                raise DecodeError("bad_frame", "first frame shorter than the length")
            total = struct.unpack_from(">I", payload)[0]
            if total <= len(payload) - 4:
                raise DecodeError("bad_frame", "total not larger than the first chunk")
            if total > self.limit:
                raise DecodeError("message_too_large", f"{total} bytes")
            self.buf, self.total = bytearray(payload[4:]), total
            return None
        if flags & MORE and not payload:
            raise DecodeError("bad_frame", "empty continuation frame")
        if len(self.buf) + len(payload) > self.total:
            raise DecodeError("bad_frame", "more bytes than declared")
        self.buf += payload
        if flags & MORE:
            if len(self.buf) == self.total:
                raise DecodeError("bad_frame", "MORE on the completing frame")
            return None
        if len(self.buf) != self.total:
            raise DecodeError("bad_frame", "last frame short of the total")
        msg, self.buf = bytes(self.buf), None
        return msg


def enc_message(stream, flags, msg, max_frame):
    """The frames of one message, split as the vectors' encoder does."""
    if len(msg) <= max_frame:
        return frame(stream, DATA, flags, msg)
    out = frame(stream, DATA, MORE, struct.pack(">I", len(msg)) + msg[:max_frame - 4])
    rest = msg[max_frame - 4:]
    while len(rest) > max_frame:
        out += frame(stream, DATA, MORE, rest[:max_frame])
        rest = rest[max_frame:]
    return out + frame(stream, DATA, flags & END, rest)


# --- Test vectors (PROTOCOL.md: Test vectors) --------------------------------

def md_fields(md):
    return [[k.decode(), v.decode()] for k, v in md]


def md_from(fields):
    return [(k.encode(), v.encode()) for k, v in (fields or [])]


def decode_vector(kind, b):
    if kind == "frame":
        stream, typ, flags, payload, size = parse_frame(b)
        if size != len(b):
            raise DecodeError("bad_frame", "bytes after the frame")
        return {"length": len(payload), "stream": stream, "type": TYPE_NAMES[typ], "type_id": typ,
                "flags": flags, "payload": payload.hex()}
    if kind == "preface":
        s, size = dec_preface(b)
        return {"version": b[4], **s, "size": size}
    if kind == "callheader":
        method, codec, timeout, md = dec_call_header(b)
        return {"method": method.decode(), "codec": codec, "timeout_us": timeout, "metadata": md_fields(md)}
    if kind == "trailer":
        code, msg, details, md = dec_trailer(b)
        return {"code": code, "message": msg.decode(), "details": [d.hex() for d in details],
                "metadata": md_fields(md)}
    if kind == "metadata":
        return {"metadata": md_fields(dec_metadata(b))}
    if kind == "window":
        return {"increment": dec_window(b)}
    if kind == "goaway":
        last, code, msg = dec_goaway(b)
        return {"last_stream": last, "code": code, "message": msg.decode()}
    if kind == "message":
        asm, frames, i = Assembler(), 0, 0
        while i < len(b):
            stream, typ, flags, payload, size = parse_frame(b[i:])
            i += size
            frames += 1
            if asm.buf is not None and typ != DATA:
                raise DecodeError("bad_frame", "another type inside a chunked message")
            msg = asm.add(flags, payload)
            if msg is not None:
                if i != len(b):
                    raise DecodeError("bad_frame", "bytes after the message")
                return {"stream": stream, "type": TYPE_NAMES[typ], "flags": flags, "frames": frames,
                        "message": msg.hex()}
        raise Incomplete()
    raise Fail(f"unknown vector kind {kind!r}")


def encode_vector(kind, f):
    if kind == "frame":
        return frame(f["stream"], f["type_id"], f["flags"], bytes.fromhex(f["payload"]))
    if kind == "preface":
        return enc_preface(f)
    if kind == "callheader":
        return enc_call_header(f["method"].encode(), f["codec"], f["timeout_us"], md_from(f["metadata"]))
    if kind == "trailer":
        return enc_trailer(f["code"], f["message"].encode(), [bytes.fromhex(d) for d in f["details"] or []],
                           md_from(f["metadata"]))
    if kind == "metadata":
        return enc_metadata(md_from(f["metadata"]))
    if kind == "window":
        return struct.pack(">I", f["increment"])
    if kind == "goaway":
        return struct.pack(">I", f["last_stream"]) + uvarint(f["code"]) + f["message"].encode()
    if kind == "message":
        return enc_message(f["stream"], f["flags"], bytes.fromhex(f["message"]), f["max_frame"])
    raise Fail(f"unknown vector kind {kind!r}")


def normalize(kind, f):
    f = dict(f)
    for k in ("metadata", "details"):
        if k in f and f[k] is None:
            f[k] = []
    if kind == "message":
        f.pop("max_frame", None)
    return f


def check_vectors(path):
    with open(path, encoding="utf-8") as fh:
        vectors = json.load(fh)
    for v in vectors:
        b = bytes.fromhex(v["hex"])
        try:
            got = decode_vector(v["kind"], b)
            err = ""
        except DecodeError as e:
            got, err = None, e.cls
        except Incomplete:
            got, err = None, "incomplete"
        if err != v["error"]:
            raise Fail(f"vector {v['name']!r}: error {err!r}, want {v['error']!r}")
        if err:
            continue
        if got != normalize(v["kind"], v["fields"]):
            raise Fail(f"vector {v['name']!r}: decoded {got}, want {v['fields']}")
        if not v.get("noncanonical") and encode_vector(v["kind"], v["fields"]) != b:
            raise Fail(f"vector {v['name']!r}: re-encoded {encode_vector(v['kind'], v['fields']).hex()}")
    ok(f"{len(vectors)} test vectors decode and re-encode as specified")
    return vectors


# --- A connection (PROTOCOL.md: Streams, Flow control, Calls) ---------------

class Stream:
    def __init__(self, sid, local_window, peer_window):
        self.id = sid
        self.send_win = peer_window
        self.recv_win = local_window  # credit the peer may still use
        self.owed = 0  # stream credit owed to the peer
        self.asm = Assembler()
        self.messages = []  # complete messages the application has not taken
        self.header = None
        self.trailer = None  # (code, message, details, metadata)
        self.closed = False


class Conn:
    def __init__(self, path, settings=None):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(20)
        self.sock.connect(path)
        self.local = {name: d for name, d, _, _ in SETTINGS.values()}
        self.local.update(settings or {})
        self.buf = bytearray()
        self.streams = {}
        self.next_id = 1
        self.goaway = None  # (last, code, message) received
        self.pings = {}
        # The client sends its preface first, then waits for the server's
        # before sending any frame.
        self.sock.sendall(enc_preface(self.local))
        while True:
            try:
                self.peer, size = dec_preface(self.buf)
                break
            except Incomplete:
                self.fill()
        del self.buf[:size]
        self.conn_send_win = 16 * self.peer["initial_window"]
        self.conn_recv_win = 16 * self.local["initial_window"]
        self.conn_owed = 0

    def fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError("connection closed by the server")
        self.buf += chunk

    def send(self, data):
        self.sock.sendall(data)

    def read_frame(self):
        """Reads and handles one frame."""
        while True:
            try:
                sid, typ, flags, p, size = parse_frame(self.buf, self.local["max_frame_size"])
                break
            except Incomplete:
                self.fill()
        del self.buf[:size]
        self.handle(sid, typ, flags, p)
        return sid, typ, flags, p

    def handle(self, sid, typ, flags, p):
        if typ == PING:
            if flags & ACK:
                self.pings[p] = True
            else:
                self.send(frame(0, PING, ACK, p))
            return
        if typ == WINDOW:
            incr = dec_window(p)
            if sid == 0:
                self.conn_send_win += incr
            elif sid in self.streams:
                self.streams[sid].send_win += incr
            return
        if typ == GOAWAY:
            last, code, msg = dec_goaway(p)
            self.goaway = (last, code, msg)
            for st in self.streams.values():
                if st.id > last and not st.closed:
                    st.closed = True
                    st.trailer = (14 if code in (0, 14) else code, b"GOAWAY: " + msg, [], [])
            return
        st = self.streams.get(sid)
        if typ == DATA:
            # Every DATA frame counts against the connection window.
            self.conn_recv_win -= len(p)
            if self.conn_recv_win < 0:
                raise Fail("the server sent more than the connection window")
            if st is not None and not st.closed:
                st.recv_win -= len(p)
                if st.recv_win < 0:
                    raise Fail(f"the server sent more than stream {sid}'s window")
                if len(p) > self.local["initial_window"] // 2:
                    raise Fail(f"a DATA frame of {len(p)} bytes, over half the window")
            if st is None or st.closed:
                self.credit_conn(len(p))  # dropped: owed to the connection at once
                return
            msg = st.asm.add(flags, p)
            if msg is None:
                # A piece of a message being assembled: owed at once.
                self.credit(st, len(p))
            else:
                st.messages.append((msg, len(p)))
            return
        if st is None:
            return
        if typ == HEADERS:
            st.header = dec_metadata(p)
        elif typ == TRAILERS:
            st.trailer = dec_trailer(p)
            st.closed = True

    def credit_conn(self, n):
        self.conn_owed += n
        if self.conn_owed >= 16 * self.local["initial_window"] // 2:
            self.send(frame(0, WINDOW, 0, struct.pack(">I", self.conn_owed)))
            self.conn_recv_win += self.conn_owed
            self.conn_owed = 0

    def credit(self, st, n):
        self.credit_conn(n)
        if st.closed:
            return
        st.owed += n
        if st.owed >= self.local["initial_window"] // 2:
            self.send(frame(st.id, WINDOW, 0, struct.pack(">I", st.owed)))
            st.recv_win += st.owed
            st.owed = 0

    def open(self, method, codec, md=None, timeout_us=0, end=False, header=None):
        """Opens a stream with a call header, or with the payload header."""
        if self.goaway is not None:
            raise Fail("opening a stream after the server's GOAWAY")
        st = Stream(self.next_id, self.local["initial_window"], self.peer["initial_window"])
        self.next_id += 2
        self.streams[st.id] = st
        if header is None:
            header = enc_call_header(method, codec, timeout_us, md)
        self.send(frame(st.id, HEADERS, END if end else 0, header))
        return st

    def send_message(self, st, msg, end):
        """Sends msg in frames of at most half the peer's InitialWindow (and its
        MaxFrameSize), waiting for credit for each."""
        if len(msg) > self.peer["max_message_size"]:
            raise Fail("message over the server's MaxMessageSize")
        per = min(self.peer["max_frame_size"], self.peer["initial_window"] // 2)
        if len(msg) <= per:
            pieces = [(msg, END if end else 0)]
        else:
            body = struct.pack(">I", len(msg)) + msg
            pieces = [(body[i:i + per], MORE) for i in range(0, len(body), per)]
            pieces[-1] = (pieces[-1][0], END if end else 0)
        for payload, flags in pieces:
            while st.send_win < len(payload) or self.conn_send_win < len(payload):
                if st.closed:
                    raise Fail(f"stream {st.id} ended while sending: {st.trailer}")
                self.read_frame()
            st.send_win -= len(payload)
            self.conn_send_win -= len(payload)
            self.send(frame(st.id, DATA, flags, payload))

    def recv(self, st):
        """Returns the next message of st, or None at the end of the stream."""
        while not st.messages:
            if st.closed:
                return None
            self.read_frame()
        msg, cost = st.messages.pop(0)
        self.credit(st, cost)  # the application took it
        return msg

    def finish(self, st):
        """Reads st to its end; returns (messages, trailer)."""
        msgs = []
        while (m := self.recv(st)) is not None:
            msgs.append(m)
        del self.streams[st.id]
        return msgs, st.trailer

    def ping(self, data):
        self.send(frame(0, PING, 0, data))
        while data not in self.pings:
            self.read_frame()

    def unary(self, method, codec, msg, md=None):
        st = self.open(method, codec, md)
        self.send_message(st, msg, True)
        msgs, tr = self.finish(st)
        return msgs, tr, st.header


# --- The checks --------------------------------------------------------------

def ok(what):
    print("ok  ", what, flush=True)


def expect(cond, what):
    if not cond:
        raise Fail(what)


def check_calls(path, vectors=()):
    c = Conn(path)
    expect(c.peer["max_message_size"] == 65 << 20,
           f"server MaxMessageSize {c.peer['max_message_size']}, want {65 << 20} (clients/testserver)")
    ok(f"preface: server settings {c.peer}")

    msgs, tr, _ = c.unary(b"Test.Echo", JSON, b'{"a":[1,2,3]}')
    expect(tr[0] == 0, f"Test.Echo: status {tr}")
    expect([json.loads(m) for m in msgs] == [{"a": [1, 2, 3]}], f"Test.Echo: replies {msgs}")
    ok("unary Test.Echo (JSON)")

    for name in (b"/Test/Echo", b"/Test.Echo", b"Nope", b"Test.", b".Echo", b"Test.Ec ho"):
        msgs, tr, _ = c.unary(name, JSON, b"{}")
        expect(tr[0] == 3 and not msgs, f"{name}: status {tr}, want 3 (InvalidArgument)")
    ok("names not of the form Service.Method (HTTP spellings, no dot): 3 (InvalidArgument)")
    answered = [v for v in vectors if v["kind"] == "callheader" and "status" in v]
    for v in answered:
        msgs, tr = c.finish(c.open(None, None, end=True, header=bytes.fromhex(v["hex"])))
        expect(tr[0] == v["status"] and not msgs, f"vector {v['name']!r}: status {tr}, want {v['status']}")
    if answered:
        ok(f"{len(answered)} call header vectors with a status: answered with it")
    msgs, tr, _ = c.unary(b"Test.Nope", JSON, b"{}")
    expect(tr[0] == 12 and not msgs, f"Test.Nope: status {tr}, want 12 (Unimplemented)")
    ok("a well-formed name the server does not serve: 12 (Unimplemented)")

    st = c.open(b"Test.Count", JSON)
    c.send_message(st, b'{"n":5}', True)
    msgs, tr = c.finish(st)
    expect(tr[0] == 0, f"Test.Count: status {tr}")
    expect([json.loads(m) for m in msgs] == [{"i": i} for i in range(5)], f"Test.Count: replies {msgs}")
    ok("server stream Test.Count: 5 messages, then status OK")

    big = os.urandom(3 << 20)
    expect(len(big) > c.peer["initial_window"] and len(big) > c.local["initial_window"],
           "the message is not larger than the windows")
    t0 = time.monotonic()
    msgs, tr, _ = c.unary(b"Test.EchoRaw", RAW, big)
    expect(tr[0] == 0, f"Test.EchoRaw: status {tr}")
    expect(msgs == [big], f"Test.EchoRaw: got {[len(m) for m in msgs]} bytes back")
    ok(f"Test.EchoRaw: 3 MiB each way, larger than InitialWindow ({time.monotonic() - t0:.2f} s)")

    md = [(b"trace-id", b"abc"), (b"tenant", b"t1")]
    msgs, tr, header = c.unary(b"Test.Metadata", JSON, b"{}", md)
    expect(tr[0] == 0, f"Test.Metadata: status {tr}")
    got = json.loads(msgs[0])["metadata"]
    expect(got == {"trace-id": ["abc"], "tenant": ["t1"]}, f"Test.Metadata: server saw {got}")
    expect(header == [(b"x-header", b"h")], f"Test.Metadata: reply metadata {header}")
    expect(tr[3] == [(b"x-trailer", b"t")], f"Test.Metadata: trailing metadata {tr[3]}")
    md = [(b"k", b"1"), (b"Key-Upper", "žluť".encode()), (b"k", b"2")]
    msgs, tr, _ = c.unary(b"Test.Metadata", JSON, b"{}", md)
    got = json.loads(msgs[0])["metadata"]
    expect(got == {"k": ["1", "2"], "Key-Upper": ["žluť"]}, f"Test.Metadata: server saw {got}")
    ok("metadata: request, reply and trailing; keys case-sensitive, repeated values in order, UTF-8 values")

    st = c.open(b"Test.Echo", JSON, end=True)
    msgs, tr = c.finish(st)
    expect(tr[0] == 3 and not msgs, f"unary without a message: {tr}, want 3 (InvalidArgument)")
    ok("unary call with no request message: 3 (InvalidArgument)")

    st = c.open(b"Test.Echo", JSON)
    c.send_message(st, b"1", False)
    c.send_message(st, b"2", True)
    msgs, tr = c.finish(st)
    expect(tr[0] == 0 and msgs == [b"1"], f"unary with two messages: {msgs} {tr}, want [1] OK")
    ok("unary call with two request messages: the first is answered")

    c.send(frame(c.next_id + 1000, DATA, 0, b"x" * 100))
    c.send(frame(c.next_id + 1000, CANCEL, 0))
    c.ping(b"pingpong")
    ok("DATA and CANCEL for a stream never opened are ignored; PING answered with ACK")

    st = c.open(b"Test.Sleep", JSON)
    c.send_message(st, b'{"ms":30000}', True)
    c.send(frame(st.id, CANCEL, 0))
    del c.streams[st.id]
    deadline = time.monotonic() + 5
    while True:
        msgs, tr, _ = c.unary(b"Test.Pending", JSON, b"{}")
        if json.loads(msgs[0]) == {"pending": 0}:
            break
        expect(time.monotonic() < deadline, "Test.Sleep still running 5 s after its CANCEL")
        time.sleep(0.02)
    ok("CANCEL stops the handler")

    c.send(frame(0, GOAWAY, 0, struct.pack(">I", 0) + uvarint(0) + b"client done"))
    msgs, tr, _ = c.unary(b"Test.Echo", JSON, b"7")
    expect(tr[0] == 0 and msgs == [b"7"], f"call after the client's GOAWAY: {msgs} {tr}")
    c.ping(b"last one")
    expect(c.goaway is None, f"the server sent GOAWAY {c.goaway}")
    c.sock.close()
    ok("the client's GOAWAY leaves its own streams served")


def check_settings(path):
    """The server's settings follow the client's (PROTOCOL.md, Choosing
    MaxFrameSize), and large messages move whatever the windows."""
    cases = [
        ({"max_frame_size": 1 << 20, "initial_window": 4 << 20}, 512 << 10, 2 << 20),
        ({"max_frame_size": 16384, "initial_window": 65536}, 65536, 1 << 20),
    ]
    for mine, frame_size, window in cases:
        c = Conn(path, mine)
        got = (c.peer["max_frame_size"], c.peer["initial_window"])
        expect(got == (frame_size, window), f"client {mine}: server announced {got}, want {(frame_size, window)}")
        big = os.urandom(3 << 20)
        msgs, tr, _ = c.unary(b"Test.EchoRaw", RAW, big)
        expect(tr[0] == 0 and msgs == [big], f"client {mine}: Test.EchoRaw: {tr}")
        c.sock.close()
        ok(f"client settings {mine}: server announces MaxFrameSize {frame_size}, InitialWindow {window}; "
           "3 MiB each way within the windows")


def check_shutdown(path, pid):
    """The drain (PROTOCOL.md, Go-away): GOAWAY comes before the drain ends any stream;
    calls at or below its last stream id complete; a call sent in the race
    with it is either processed or answered with TRAILERS code 14 (never
    processed), never neither; the connection ends without a reset."""
    c = Conn(path)
    a = c.open(b"Test.Sleep", JSON)
    c.send_message(a, b'{"ms":300}', True)
    c.ping(b"in place")  # the call is in before the signal
    os.kill(pid, signal.SIGTERM)
    b = c.open(b"Test.Echo", JSON)  # races with the GOAWAY
    c.send_message(b, b'{"b":1}', True)
    events = []  # in order: ("goaway", last, code, msg) and ("trailers", stream, code)
    try:
        while True:
            sid, typ, _, p = c.read_frame()
            if typ == GOAWAY:
                events.append(("goaway",) + dec_goaway(p))
            elif typ == TRAILERS:
                events.append(("trailers", sid, dec_trailer(p)[0]))
    except EOFError:
        pass
    except ConnectionResetError:
        raise Fail(f"the connection was reset during the drain; frames read: {events}")
    first = next((i for i, e in enumerate(events) if e[0] == "goaway"), None)
    expect(first is not None, f"no GOAWAY: {events}")
    # Before the GOAWAY, only calls that ran to their end (not ended by the drain).
    early = [e for e in events[:first] if e[2] != 0 or e[1] == a.id]
    expect(not early, f"a stream ended before the GOAWAY: {events}")
    _, last, code, msg = events[first]
    expect(code == 14, f"shutdown GOAWAY code {code}, want 14 (Unavailable)")
    expect(a.id <= last, f"shutdown GOAWAY last stream id {last}, below the call in progress {a.id}")
    ends = {e[1]: e[2] for e in events if e[0] == "trailers"}
    msgs = [json.loads(m) for m, _ in a.messages]
    expect(ends.get(a.id) == 0 and msgs == [{"slept": 300}],
           f"the call in progress did not complete: {msgs} {ends.get(a.id)}")
    got = [json.loads(m) for m, _ in b.messages]
    if b.id <= last:
        expect(ends.get(b.id) == 0 and got == [{"b": 1}], f"call {b.id} at or below {last} did not complete: {got} {ends.get(b.id)}")
        race = "processed"
    else:
        expect(ends.get(b.id) == 14 and not got, f"call {b.id} above {last}: {got} {ends.get(b.id)}, want TRAILERS 14")
        race = "answered 14, never processed"
    ok(f"graceful shutdown: GOAWAY code 14 ({msg.decode()!r}) first, last stream {last} completed, "
       f"the racing call {race}, connection closed without a reset")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("socket")
    ap.add_argument("--vectors")
    ap.add_argument("--server-pid", type=int)
    a = ap.parse_args()
    try:
        vectors = check_vectors(a.vectors) if a.vectors else ()
        check_calls(a.socket, vectors)
        check_settings(a.socket)
        if a.server_pid:
            check_shutdown(a.socket, a.server_pid)
    except (Fail, DecodeError, EOFError, OSError) as e:
        print("FAIL", e, file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
