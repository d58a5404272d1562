// The warren wire format (PROTOCOL.md): preface, frame header, the payloads
// of HEADERS, TRAILERS, WINDOW and GOAWAY, metadata blocks and uvarints.
// Pure functions over Uint8Array, shared by Node and browsers.

/** Frame types. */
export const FrameType = {
  Headers: 0x1,
  Data: 0x2,
  Trailers: 0x3,
  Cancel: 0x4,
  Window: 0x5,
  Ping: 0x6,
  GoAway: 0x7,
} as const;

/** Frame flags. */
export const FLAG_MORE = 0x01;
export const FLAG_END = 0x02;
export const FLAG_ACK = 0x04;

export const HEADER_SIZE = 10;
export const PREFACE_MAGIC = [0xf0, 0x57, 0x52, 0x4e];
export const VERSION = 1;

/** Connection settings: what the side that sends them accepts. */
export interface Settings {
  maxFrameSize: number;
  maxMessageSize: number;
  initialWindow: number;
  maxStreams: number;
}

export const DEFAULT_SETTINGS: Readonly<Settings> = Object.freeze({
  maxFrameSize: 65536,
  maxMessageSize: 4 << 20,
  initialWindow: 1 << 20,
  maxStreams: 1024,
});

const SETTING_IDS: [keyof Settings, number, number, number][] = [
  // name, id, min, max
  ["maxFrameSize", 1, 1024, 16 << 20],
  ["maxMessageSize", 2, 1, 1 << 30],
  ["initialWindow", 3, 1024, 0x7fffffff],
  ["maxStreams", 4, 1, 0x7fffffff],
];

/**
 * The class of a wire error, as in testdata/vectors.json: what a decoder
 * found wrong with its input.
 */
export type WireErrorClass =
  | "frame_too_large"
  | "bad_frame"
  | "bad_payload"
  | "message_too_large"
  | "not_warren"
  | "http_request"
  | "bad_version"
  | "bad_preface"
  | "bad_setting"
  | "incomplete";

/** A WireError is input that breaks the wire format. */
export class WireError extends Error {
  readonly kind: WireErrorClass;
  constructor(kind: WireErrorClass, message: string) {
    super(`warren: ${kind.replace(/_/g, " ")}: ${message}`);
    this.name = "WireError";
    this.kind = kind;
  }
}

// ---- uvarint and byte strings ----

/** A cursor over a payload; every read checks the bytes that remain. */
export class Reader {
  pos = 0;
  constructor(readonly b: Uint8Array, readonly what = "payload") {}

  get remaining(): number {
    return this.b.length - this.pos;
  }

  uvarint(): number {
    // Values up to 2^53 are exact; larger ones (still at most 64 bits) are
    // accepted and come back as a lossy number: nothing in the protocol
    // uses uvarints that large except lengths, which are then refused.
    let x = 0;
    let mul = 1;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.b.length) throw new WireError("bad_payload", `${this.what}: truncated uvarint`);
      const c = this.b[this.pos++];
      if (i === 9 && c > 1) throw new WireError("bad_payload", `${this.what}: uvarint overflows 64 bits`);
      x += (c & 0x7f) * mul;
      if (c < 0x80) return x;
      mul *= 128;
    }
    throw new WireError("bad_payload", `${this.what}: uvarint overflows 64 bits`);
  }

  bytes(): Uint8Array {
    const n = this.uvarint();
    if (n > this.remaining) throw new WireError("bad_payload", `${this.what}: length ${n} past the end (${this.remaining} bytes left)`);
    const v = this.b.subarray(this.pos, this.pos + n);
    this.pos += n;
    return v;
  }
}

export function uvarintSize(x: number): number {
  let n = 1;
  while (x >= 128) {
    x = Math.floor(x / 128);
    n++;
  }
  return n;
}

/** Writes x as a uvarint at b[pos] and returns the position after it. */
export function putUvarint(b: Uint8Array, pos: number, x: number): number {
  while (x >= 128) {
    b[pos++] = (x % 128) | 0x80;
    x = Math.floor(x / 128);
  }
  b[pos++] = x;
  return pos;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: false });

export function utf8(s: string): Uint8Array {
  return encoder.encode(s);
}

export function fromUtf8(b: Uint8Array): string {
  return decoder.decode(b);
}

// ---- preface ----

/** Encodes a preface, leaving out settings equal to their defaults. */
export function encodePreface(s: Partial<Settings> = {}): Uint8Array {
  const out: number[] = [...PREFACE_MAGIC, VERSION, 0];
  let count = 0;
  for (const [name, id] of SETTING_IDS) {
    const v = s[name];
    if (v === undefined || v === DEFAULT_SETTINGS[name]) continue;
    out.push(id >> 8, id & 0xff, (v >>> 24) & 0xff, (v >>> 16) & 0xff, (v >>> 8) & 0xff, v & 0xff);
    count++;
  }
  out[5] = count;
  return Uint8Array.from(out);
}

/** Checks settings against their allowed ranges; throws a WireError. */
export function checkSettings(s: Settings): void {
  for (const [name, , lo, hi] of SETTING_IDS) {
    const v = s[name];
    if (!Number.isInteger(v) || v < lo || v > hi) throw new WireError("bad_setting", `${name} ${v} is outside ${lo}..${hi}`);
  }
}

const HTTP_METHODS = ["GET ", "POST", "PUT ", "HEAD", "DELE", "OPTI", "PATC", "CONN", "TRAC", "PRI "].map((m) =>
  Array.from(m, (c) => c.charCodeAt(0)),
);

/**
 * Decodes a preface at the start of b. It returns the settings (defaults
 * filled in) and the number of bytes the preface takes, or throws a
 * WireError; "incomplete" means b is a valid beginning and more is needed.
 * It fails as soon as the bytes prove they are not a preface.
 */
export function decodePreface(b: Uint8Array): { settings: Settings; size: number } {
  for (let i = 0; i < 4 && i < b.length; i++) {
    if (b[i] !== PREFACE_MAGIC[i]) {
      const n = Math.min(b.length, 4);
      const prefixOf = HTTP_METHODS.some((m) => m.slice(0, n).every((c, j) => c === b[j]));
      if (prefixOf && n === 4) throw new WireError("http_request", "the peer speaks HTTP, not warren");
      if (prefixOf) throw new WireError("incomplete", "waiting for 4 bytes to tell an HTTP request");
      throw new WireError("not_warren", `the peer is not a warren peer (first bytes ${hex(b.subarray(0, n))})`);
    }
  }
  if (b.length < 5) throw new WireError("incomplete", "preface: need more bytes");
  if (b[4] !== VERSION) throw new WireError("bad_version", `protocol version ${b[4]} is not supported (this client speaks version 1)`);
  if (b.length < 6) throw new WireError("incomplete", "preface: need more bytes");
  const count = b[5];
  if (count > 16) throw new WireError("bad_preface", `${count} settings (at most 16)`);
  const size = 6 + 6 * count;
  if (b.length < size) throw new WireError("incomplete", "preface: need more bytes");
  const s: Settings = { ...DEFAULT_SETTINGS };
  for (let i = 0; i < count; i++) {
    const p = 6 + 6 * i;
    const id = (b[p] << 8) | b[p + 1];
    const v = ((b[p + 2] << 24) | (b[p + 3] << 16) | (b[p + 4] << 8) | b[p + 5]) >>> 0;
    const def = SETTING_IDS.find((d) => d[1] === id);
    if (def) s[def[0]] = v;
  }
  checkSettings(s);
  return { settings: s, size };
}

// ---- frame header ----

export interface FrameHeader {
  length: number;
  stream: number;
  type: number;
  flags: number;
}

export function readU32(b: Uint8Array, p: number): number {
  return ((b[p] << 24) | (b[p + 1] << 16) | (b[p + 2] << 8) | b[p + 3]) >>> 0;
}

export function putU32(b: Uint8Array, p: number, v: number): void {
  b[p] = v >>> 24;
  b[p + 1] = v >>> 16;
  b[p + 2] = v >>> 8;
  b[p + 3] = v;
}

/** Writes a frame header at b[p]. */
export function putHeader(b: Uint8Array, p: number, length: number, stream: number, type: number, flags: number): void {
  putU32(b, p, length);
  putU32(b, p + 4, stream);
  b[p + 8] = type;
  b[p + 9] = flags;
}

/**
 * Checks a frame header against the rules a receiver applies before it
 * reads the payload (PROTOCOL.md, "Frame types" and "Flags").
 */
export function checkHeader(h: FrameHeader, maxFrameSize: number): void {
  if (h.length > maxFrameSize) throw new WireError("frame_too_large", `frame payload of ${h.length} bytes is over MaxFrameSize ${maxFrameSize}`);
  switch (h.type) {
    case FrameType.Headers:
    case FrameType.Trailers:
      if (h.flags & FLAG_MORE) throw new WireError("bad_frame", `MORE on a ${typeName(h.type)} frame`);
    // fallthrough
    case FrameType.Data:
    case FrameType.Cancel:
      if (h.stream === 0) throw new WireError("bad_frame", `${typeName(h.type)} frame on stream 0`);
      break;
    case FrameType.Window:
      if (h.length !== 4) throw new WireError("bad_frame", `WINDOW payload of ${h.length} bytes (want 4)`);
      break;
    case FrameType.Ping:
      if (h.stream !== 0) throw new WireError("bad_frame", `PING frame on stream ${h.stream}`);
      if (h.length !== 8) throw new WireError("bad_frame", `PING payload of ${h.length} bytes (want 8)`);
      break;
    case FrameType.GoAway:
      if (h.stream !== 0) throw new WireError("bad_frame", `GOAWAY frame on stream ${h.stream}`);
      break;
    default:
      throw new WireError("bad_frame", `unknown frame type 0x${h.type.toString(16)}`);
  }
}

export function typeName(t: number): string {
  return ["0", "HEADERS", "DATA", "TRAILERS", "CANCEL", "WINDOW", "PING", "GOAWAY"][t] ?? `0x${t.toString(16)}`;
}

/** Encodes one frame. */
export function encodeFrame(stream: number, type: number, flags: number, payload: Uint8Array = EMPTY): Uint8Array {
  const b = new Uint8Array(HEADER_SIZE + payload.length);
  putHeader(b, 0, payload.length, stream, type, flags);
  b.set(payload, HEADER_SIZE);
  return b;
}

/**
 * Decodes one whole frame at the start of b (for tests and tools; the
 * connection parses its stream of bytes incrementally).
 */
export function decodeFrame(b: Uint8Array, maxFrameSize = DEFAULT_SETTINGS.maxFrameSize): FrameHeader & { payload: Uint8Array; size: number } {
  if (b.length < HEADER_SIZE) throw new WireError("incomplete", "frame header: need more bytes");
  const h = { length: readU32(b, 0), stream: readU32(b, 4), type: b[8], flags: b[9] };
  checkHeader(h, maxFrameSize);
  if (b.length < HEADER_SIZE + h.length) throw new WireError("incomplete", "frame payload: need more bytes");
  return { ...h, payload: b.subarray(HEADER_SIZE, HEADER_SIZE + h.length), size: HEADER_SIZE + h.length };
}

export const EMPTY = new Uint8Array(0);

// ---- metadata ----

/** Metadata: pairs of key and value, keys may repeat, order is kept. */
export type Metadata = [string, string][];

export function metadataSize(md: Metadata | undefined): number {
  if (!md || md.length === 0) return 0;
  let n = uvarintSize(md.length);
  for (const [k, v] of md) {
    const kl = utf8Length(k);
    const vl = utf8Length(v);
    n += uvarintSize(kl) + kl + uvarintSize(vl) + vl;
  }
  return n;
}

function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n += 4;
        i++;
      } else n += 3;
    } else n += 3;
  }
  return n;
}

function putBytes(b: Uint8Array, p: number, v: Uint8Array): number {
  p = putUvarint(b, p, v.length);
  b.set(v, p);
  return p + v.length;
}

function putString(b: Uint8Array, p: number, s: string): number {
  if (s.length === 0) {
    b[p] = 0;
    return p + 1;
  }
  const r = encoder.encodeInto(s, b.subarray(p + uvarintSize(utf8Length(s))));
  p = putUvarint(b, p, r.written);
  return p + r.written;
}

/** Writes a metadata block at b[p]; nothing for no metadata. */
export function putMetadata(b: Uint8Array, p: number, md: Metadata | undefined): number {
  if (!md || md.length === 0) return p;
  p = putUvarint(b, p, md.length);
  for (const [k, v] of md) {
    p = putString(b, p, k);
    p = putString(b, p, v);
  }
  return p;
}

export function encodeMetadata(md: Metadata | undefined): Uint8Array {
  const b = new Uint8Array(metadataSize(md));
  putMetadata(b, 0, md);
  return b;
}

/** Reads a metadata block that runs to the end of r. */
function readMetadata(r: Reader): Metadata | null {
  if (r.remaining === 0) return null;
  const n = r.uvarint();
  // Each pair takes at least 2 bytes: bound the count before allocating.
  if (n * 2 > r.remaining) throw new WireError("bad_payload", `${r.what}: ${n} metadata pairs cannot fit in ${r.remaining} bytes`);
  const md: Metadata = [];
  for (let i = 0; i < n; i++) md.push([fromUtf8(r.bytes()), fromUtf8(r.bytes())]);
  if (r.remaining !== 0) throw new WireError("bad_payload", `${r.what}: ${r.remaining} bytes after the metadata block`);
  return md.length ? md : null;
}

export function decodeMetadata(b: Uint8Array): Metadata | null {
  return readMetadata(new Reader(b, "metadata"));
}

// ---- call header ----

export interface CallHeader {
  method: string;
  codec: number;
  timeoutUs: number;
  metadata: Metadata | null;
}

export function encodeCallHeader(method: string, codec: number, timeoutUs: number, md?: Metadata | null): Uint8Array {
  const ml = utf8Length(method);
  const size = uvarintSize(ml) + ml + 1 + uvarintSize(timeoutUs) + metadataSize(md ?? undefined);
  const b = new Uint8Array(size);
  let p = putString(b, 0, method);
  b[p++] = codec;
  p = putUvarint(b, p, timeoutUs);
  putMetadata(b, p, md ?? undefined);
  return b;
}

export function decodeCallHeader(b: Uint8Array): CallHeader {
  const r = new Reader(b, "call header");
  const method = r.bytes();
  if (method.length === 0) throw new WireError("bad_payload", "call header: empty method");
  if (r.remaining < 1) throw new WireError("bad_payload", "call header: missing codec");
  const codec = b[r.pos++];
  const timeoutUs = r.uvarint();
  return { method: fromUtf8(method), codec, timeoutUs, metadata: readMetadata(r) };
}

// ---- trailer ----

export interface Trailer {
  code: number;
  message: string;
  details: Uint8Array[] | null;
  metadata: Metadata | null;
}

export function encodeTrailer(t: Partial<Trailer>): Uint8Array {
  const code = t.code ?? 0;
  const message = t.message ?? "";
  const details = t.details ?? [];
  const md = t.metadata ?? [];
  if (code === 0 && message === "" && details.length === 0 && md.length === 0) return EMPTY;
  const msg = utf8(message);
  let size = uvarintSize(code) + uvarintSize(msg.length) + msg.length;
  if (details.length || md.length) {
    size += uvarintSize(details.length);
    for (const d of details) size += uvarintSize(d.length) + d.length;
    size += metadataSize(md);
  }
  const b = new Uint8Array(size);
  let p = putUvarint(b, 0, code);
  p = putBytes(b, p, msg);
  if (details.length || md.length) {
    p = putUvarint(b, p, details.length);
    for (const d of details) p = putBytes(b, p, d);
    putMetadata(b, p, md);
  }
  return b;
}

export function decodeTrailer(b: Uint8Array): Trailer {
  const t: Trailer = { code: 0, message: "", details: null, metadata: null };
  if (b.length === 0) return t;
  const r = new Reader(b, "trailers");
  t.code = r.uvarint();
  if (t.code > 0xffffffff) throw new WireError("bad_payload", `trailers: status code ${t.code} does not fit in 32 bits`);
  t.message = fromUtf8(r.bytes());
  if (r.remaining === 0) return t;
  const n = r.uvarint();
  if (n > r.remaining) throw new WireError("bad_payload", `trailers: ${n} details cannot fit in ${r.remaining} bytes`);
  const details: Uint8Array[] = [];
  for (let i = 0; i < n; i++) details.push(r.bytes().slice());
  t.details = details.length ? details : null;
  t.metadata = readMetadata(r);
  return t;
}

// ---- window and goaway ----

export function decodeWindow(b: Uint8Array): number {
  if (b.length !== 4) throw new WireError("bad_payload", `WINDOW payload of ${b.length} bytes (want 4)`);
  const inc = readU32(b, 0);
  if (inc === 0 || inc > 0x7fffffff) throw new WireError("bad_payload", `WINDOW increment ${inc} is outside 1..2147483647`);
  return inc;
}

export function encodeWindow(inc: number): Uint8Array {
  const b = new Uint8Array(4);
  putU32(b, 0, inc);
  return b;
}

export interface GoAway {
  lastStream: number;
  code: number;
  message: string;
}

export function decodeGoAway(b: Uint8Array): GoAway {
  if (b.length < 5) throw new WireError("bad_payload", `GOAWAY payload of ${b.length} bytes (want at least 5)`);
  const r = new Reader(b, "GOAWAY");
  r.pos = 4;
  const code = r.uvarint();
  return { lastStream: readU32(b, 0), code, message: fromUtf8(b.subarray(r.pos)) };
}

export function encodeGoAway(g: GoAway): Uint8Array {
  const msg = utf8(g.message);
  const b = new Uint8Array(4 + uvarintSize(g.code) + msg.length);
  putU32(b, 0, g.lastStream);
  const p = putUvarint(b, 4, g.code);
  b.set(msg, p);
  return b;
}

// ---- messages ----

/**
 * Splits a message into DATA frames of at most maxFrame payload bytes
 * (the first frame of a chunked message starts with the 4-byte total
 * length), END on the last if end is set.
 */
export function encodeMessage(stream: number, msg: Uint8Array, maxFrame: number, end: boolean): Uint8Array {
  if (msg.length <= maxFrame) {
    const b = new Uint8Array(HEADER_SIZE + msg.length);
    putHeader(b, 0, msg.length, stream, FrameType.Data, end ? FLAG_END : 0);
    b.set(msg, HEADER_SIZE);
    return b;
  }
  const parts: Uint8Array[] = [];
  let off = maxFrame - 4;
  const first = new Uint8Array(HEADER_SIZE + maxFrame);
  putHeader(first, 0, maxFrame, stream, FrameType.Data, FLAG_MORE);
  putU32(first, HEADER_SIZE, msg.length);
  first.set(msg.subarray(0, off), HEADER_SIZE + 4);
  parts.push(first);
  while (off < msg.length) {
    const n = Math.min(maxFrame, msg.length - off);
    const last = off + n === msg.length;
    const f = new Uint8Array(HEADER_SIZE + n);
    putHeader(f, 0, n, stream, FrameType.Data, last ? (end ? FLAG_END : 0) : FLAG_MORE);
    f.set(msg.subarray(off, off + n), HEADER_SIZE);
    parts.push(f);
    off += n;
  }
  return concat(parts);
}

/**
 * Reassembles one message from a sequence of frames (for tests and tools).
 * It applies the chunking rules of PROTOCOL.md and MaxMessageSize.
 */
export function decodeMessage(
  b: Uint8Array,
  maxFrameSize = DEFAULT_SETTINGS.maxFrameSize,
  maxMessageSize = DEFAULT_SETTINGS.maxMessageSize,
): { stream: number; flags: number; frames: number; message: Uint8Array } {
  let pos = 0;
  let frames = 0;
  let buf: Uint8Array | null = null;
  let filled = 0;
  let stream = 0;
  for (;;) {
    const f = decodeFrame(b.subarray(pos), maxFrameSize);
    pos += f.size;
    frames++;
    if (f.type !== FrameType.Data) throw new WireError("bad_frame", `${typeName(f.type)} frame in the middle of a message`);
    if (frames === 1) stream = f.stream;
    else if (f.stream !== stream) throw new WireError("bad_frame", "frame of another stream");
    const more = (f.flags & FLAG_MORE) !== 0;
    if (more && f.flags & FLAG_END) throw new WireError("bad_frame", "END together with MORE");
    if (buf === null) {
      if (!more) return { stream, flags: f.flags, frames, message: f.payload.slice() };
      if (f.payload.length < 4) throw new WireError("bad_frame", "first chunk shorter than its length prefix");
      const total = readU32(f.payload, 0);
      if (total > maxMessageSize) throw new WireError("message_too_large", `message of ${total} bytes is over MaxMessageSize ${maxMessageSize}`);
      if (total <= f.payload.length - 4) throw new WireError("bad_frame", `declared length ${total} is not above the first chunk`);
      buf = new Uint8Array(total);
      buf.set(f.payload.subarray(4));
      filled = f.payload.length - 4;
      continue;
    }
    if (f.payload.length === 0) throw new WireError("bad_frame", "empty continuation frame");
    if (filled + f.payload.length > buf.length) throw new WireError("bad_frame", "chunks go past the declared length");
    buf.set(f.payload, filled);
    filled += f.payload.length;
    if (filled === buf.length) {
      if (more) throw new WireError("bad_frame", "MORE on the frame that completes the message");
      return { stream, flags: f.flags, frames, message: buf };
    }
    if (!more) throw new WireError("bad_frame", "last frame short of the declared length");
  }
}

export function concat(parts: Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0];
  let n = 0;
  for (const p of parts) n += p.length;
  const b = new Uint8Array(n);
  let o = 0;
  for (const p of parts) {
    b.set(p, o);
    o += p.length;
  }
  return b;
}

export function hex(b: Uint8Array): string {
  let s = "";
  for (const c of b) s += c.toString(16).padStart(2, "0");
  return s;
}

export function fromHex(s: string): Uint8Array {
  const b = new Uint8Array(s.length / 2);
  for (let i = 0; i < b.length; i++) b[i] = parseInt(s.substr(2 * i, 2), 16);
  return b;
}
