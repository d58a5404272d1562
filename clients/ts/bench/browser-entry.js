// Bundled by bench/browser.mjs into the benchmark page: 16 concurrent
// 1 KiB echo calls on one WebSocket connection, from Chromium.
import { connect, raw } from "../src/browser.ts";

window.runBench = async (addr, seconds, concurrency, size) => {
  const client = await connect(addr);
  const bytes = new Uint8Array(size).fill(120);
  const text = "x".repeat(size);
  const out = {};
  for (const [name, call] of [
    ["warren raw Test.EchoRaw", () => client.call("Test.EchoRaw", bytes, { codec: raw })],
    ["warren JSON Test.Echo", () => client.call("Test.Echo", text)],
  ]) {
    const warm = performance.now() + 300;
    await Promise.all(Array.from({ length: concurrency }, async () => { while (performance.now() < warm) await call(); }));
    let n = 0;
    const t0 = performance.now();
    const end = t0 + seconds * 1000;
    await Promise.all(Array.from({ length: concurrency }, async () => { while (performance.now() < end) { await call(); n++; } }));
    out[name] = Math.round(n / ((performance.now() - t0) / 1000));
  }
  await client.close();
  return out;
};
