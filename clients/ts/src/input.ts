// The input of a session: the chunks received and not yet parsed.

/** Received bytes, in the chunks they arrived in. */
export class ByteQueue {
  private chunks: Uint8Array[] = [];
  /** Bytes held. */
  avail = 0;

  push(b: Uint8Array): void {
    this.chunks.push(b);
    this.avail += b.length;
  }

  /** Takes n bytes off the input (n <= avail), copying only across chunks. */
  take(n: number): Uint8Array {
    const c = this.chunks[0];
    if (c.length === n) {
      this.chunks.shift();
      this.avail -= n;
      return c;
    }
    if (c.length > n) {
      this.chunks[0] = c.subarray(n);
      this.avail -= n;
      return c.subarray(0, n);
    }
    const b = new Uint8Array(n);
    let o = 0;
    while (o < n) {
      const d = this.chunks[0];
      const k = Math.min(d.length, n - o);
      b.set(k === d.length ? d : d.subarray(0, k), o);
      o += k;
      if (k === d.length) this.chunks.shift();
      else this.chunks[0] = d.subarray(k);
    }
    this.avail -= n;
    return b;
  }

  /** The whole input as one array (joined if need be), not taken off. */
  peekAll(): Uint8Array {
    if (this.chunks.length === 1) return this.chunks[0];
    const b = this.take(this.avail);
    this.chunks = [b];
    this.avail = b.length;
    return b;
  }
}
