// JSON with 64-bit integers. JavaScript numbers hold integers exactly only
// up to 2^53; warren services (Go int64, uint64) use the whole range. So:
//
//   - Replies are parsed with JSON.parse when their text has no run of 16 or
//     more digits (every integer below 10^15 is exact); otherwise with the
//     parser below, which returns an integer outside
//     Number.MIN_SAFE_INTEGER..Number.MAX_SAFE_INTEGER as a bigint (and
//     every other number as a number).
//   - Requests may hold bigint values anywhere; they are written as plain
//     JSON integers ({"value": 9007199254740993n} -> {"value":9007199254740993}).

const LONG_NUMBER = /\d{16}/;

/** Parses JSON text, turning integers beyond 2^53 into bigint. */
export function parseJSON(text: string): unknown {
  if (!LONG_NUMBER.test(text)) return JSON.parse(text);
  return new Parser(text).parseTop();
}

/** Serializes a value as JSON; bigint values become JSON integers. */
export function stringifyJSON(v: unknown): string {
  try {
    return JSON.stringify(v) ?? "null";
  } catch (e) {
    if (!(e instanceof TypeError) || !/bigint/i.test(e.message)) throw e;
  }
  const tag = `\u0000big${Math.random().toString(36).slice(2)}:`;
  const s = JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? tag + x.toString() : x)) ?? "null";
  const esc = JSON.stringify(tag).slice(1, -1).replace(/[\\^$.*+?()[\]{}|]/g, "\\$&");
  return s.replace(new RegExp(`"${esc}(-?\\d+)"`, "g"), "$1");
}

class Parser {
  private i = 0;
  constructor(private readonly s: string) {}

  parseTop(): unknown {
    const v = this.value();
    this.ws();
    if (this.i !== this.s.length) this.fail("unexpected text after the value");
    return v;
  }

  private fail(msg: string): never {
    throw new SyntaxError(`JSON: ${msg} at position ${this.i}`);
  }

  private ws(): void {
    const s = this.s;
    while (this.i < s.length) {
      const c = s.charCodeAt(this.i);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) this.i++;
      else break;
    }
  }

  private value(): unknown {
    this.ws();
    const c = this.s[this.i];
    switch (c) {
      case "{": {
        this.i++;
        const o: Record<string, unknown> = {};
        this.ws();
        if (this.s[this.i] === "}") {
          this.i++;
          return o;
        }
        for (;;) {
          this.ws();
          if (this.s[this.i] !== '"') this.fail("expected a string key");
          const k = this.string();
          this.ws();
          if (this.s[this.i++] !== ":") this.fail("expected ':'");
          const v = this.value();
          if (k === "__proto__") Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
          else o[k] = v;
          this.ws();
          const d = this.s[this.i++];
          if (d === "}") return o;
          if (d !== ",") this.fail("expected ',' or '}'");
        }
      }
      case "[": {
        this.i++;
        const a: unknown[] = [];
        this.ws();
        if (this.s[this.i] === "]") {
          this.i++;
          return a;
        }
        for (;;) {
          a.push(this.value());
          this.ws();
          const d = this.s[this.i++];
          if (d === "]") return a;
          if (d !== ",") this.fail("expected ',' or ']'");
        }
      }
      case '"':
        return this.string();
      case "t":
        return this.word("true", true);
      case "f":
        return this.word("false", false);
      case "n":
        return this.word("null", null);
      default:
        return this.number();
    }
  }

  private word<T>(w: string, v: T): T {
    if (!this.s.startsWith(w, this.i)) this.fail("unexpected token");
    this.i += w.length;
    return v;
  }

  private string(): string {
    // Find the closing quote, then let JSON.parse decode the escapes.
    const start = this.i;
    this.i++;
    const s = this.s;
    for (;;) {
      const j = s.indexOf('"', this.i);
      if (j < 0) this.fail("unterminated string");
      let k = j - 1;
      while (s.charCodeAt(k) === 0x5c) k--;
      this.i = j + 1;
      if ((j - 1 - k) % 2 === 0) break;
    }
    return JSON.parse(s.slice(start, this.i)) as string;
  }

  private number(): number | bigint {
    const m = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(this.s.slice(this.i, this.i + 400));
    if (!m) this.fail("unexpected token");
    this.i += m[0].length;
    if (m[2] === undefined && m[3] === undefined) {
      const n = Number(m[0]);
      return Number.isSafeInteger(n) ? n : BigInt(m[0]);
    }
    return Number(m[0]);
  }
}
