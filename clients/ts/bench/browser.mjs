// Calls per second from headless Chromium (Debian's chromium, driven by
// puppeteer-core) over one WebSocket connection to the Go test server:
// 1 KiB echo, 16 concurrent calls. The page is served at the server's own
// origin (by request interception), so the WebSocket passes its origin check;
// Chromium does not know such a page is local, so its Local Network Access
// checks are turned off.
//
//   npm run bench:browser [-- --seconds 3]
import { build } from "esbuild";
import { parseArgs } from "node:util";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import puppeteer from "puppeteer-core";
import { WebSocketServer } from "ws";
import { startServer } from "../test/helpers.mjs";

const { values: o } = parseArgs({ options: { seconds: { type: "string", default: "3" }, concurrency: { type: "string", default: "16" }, size: { type: "string", default: "1024" } } });
const here = dirname(fileURLToPath(import.meta.url));
const js = (await build({ entryPoints: [join(here, "browser-entry.js")], bundle: true, format: "iife", write: false, logLevel: "warning" })).outputFiles[0].text;

const srv = await startServer("tcp://127.0.0.1:0");
const origin = "http://" + srv.addr.replace("tcp://", "");
const browser = await puppeteer.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-features=LocalNetworkAccessChecks"] });
try {
  const page = await browser.newPage();
  await page.setRequestInterception(true);
  page.on("request", (req) => {
    if (req.url() === origin + "/bench") req.respond({ status: 200, contentType: "text/html", body: "<!doctype html><title>bench</title>" });
    else if (req.url() === origin + "/bench.js") req.respond({ status: 200, contentType: "text/javascript", body: js });
    else req.continue();
  });
  await page.goto(origin + "/bench");
  await page.addScriptTag({ url: origin + "/bench.js" });
  await page.setRequestInterception(false);
  const r = await page.evaluate((a, s, c, n) => window.runBench(a, s, c, n), origin.replace("http", "ws") + "/", Number(o.seconds), Number(o.concurrency), Number(o.size));
  // The floor: the browser's own WebSocket, echoed by a Node ws server,
  // the same number of messages in flight.
  const wss = new WebSocketServer({ port: 0, host: "127.0.0.1" });
  wss.on("connection", (s) => s.on("message", (m) => s.send(m)));
  await new Promise((res) => wss.on("listening", res));
  const echo = await page.evaluate(
    async (u, seconds, conc, size) => {
      const s = new WebSocket(u);
      s.binaryType = "arraybuffer";
      await new Promise((res) => (s.onopen = res));
      const b = new Uint8Array(size);
      let n = 0;
      let inflight = conc;
      const t0 = performance.now();
      const end = t0 + seconds * 1000;
      await new Promise((done) => {
        s.onmessage = () => {
          n++;
          if (performance.now() < end) s.send(b);
          else if (--inflight === 0) done();
        };
        for (let i = 0; i < conc; i++) s.send(b);
      });
      s.close();
      return Math.round(n / ((performance.now() - t0) / 1000));
    },
    `ws://127.0.0.1:${wss.address().port}/`,
    Number(o.seconds),
    Number(o.concurrency),
    Number(o.size),
  );
  wss.close();
  r["raw WebSocket echo (reference)"] = echo;
  console.log(`Chromium ${await browser.version()}, WebSocket to the Go test server, ${o.size} B echo, ${o.concurrency} concurrent calls, ${o.seconds} s`);
  for (const [k, v] of Object.entries(r)) console.log(`  ${k.padEnd(32)} ${String(v).padStart(8)} calls/s`);
} finally {
  await browser.close();
  await srv.kill();
}
