// The page of `warren serve` in headless Chromium (Debian's chromium,
// driven by puppeteer-core; no browser download): the token flow, live
// updates both ways, refusals. Screenshots go to test-output/browser/.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import * as http from "node:http";
import { join } from "node:path";
import puppeteer from "puppeteer-core";
import { connect, StatusError } from "../dist/node.js";
import { goBuild, startProcess, ensureOutDir } from "../test/helpers.mjs";

const run = promisify(execFile);
const chromium = process.env.CHROMIUM ?? "/usr/bin/chromium";
const shots = ensureOutDir("browser");

let warren, srv, url, token, origin, browser;

async function warrenCall(method, body, tok = token) {
  const args = ["call", srv.addr, method, JSON.stringify(body)];
  if (tok !== null) args.splice(1, 0, "--token", tok);
  const { stdout } = await run(warren, args, { env: { ...process.env, WARREN_TOKEN: "" } });
  return JSON.parse(stdout);
}

before(async () => {
  warren = goBuild("./cmd/warren", "warren");
  srv = await startProcess(warren, ["serve", "--addr", "tcp://127.0.0.1:0"], /^listening on (\S+)[\s\S]*^open (\S+)/m);
  url = /^open (\S+)/m.exec(srv.output())[1];
  token = new URL(url).searchParams.get("token");
  origin = new URL(url).origin;
  browser = await puppeteer.launch({ executablePath: chromium, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
});

after(async () => {
  await browser?.close();
  await srv?.kill();
});

test("warren serve prints the page's URL with a token", () => {
  assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/\?token=[A-Za-z0-9_-]{43}$/);
});

test("the page with no counters yet: empty, no error, then creates one at 0", async () => {
  assert.deepEqual(await warrenCall("Counter.List", {}), {}, "an empty list is {} in the protobuf JSON mapping");
  const page = await browser.newPage();
  await page.goto(url, { waitUntil: "load" });
  await page.waitForFunction(() => document.querySelector("#status")?.classList.contains("ok"), { timeout: 5000 });
  await new Promise((r) => setTimeout(r, 1500)); // at least one Counter.List refresh
  assert.equal(await page.$eval("#banner", (e) => e.classList.contains("show")), false, "no error shown");
  assert.equal(await page.$eval("#n", (e) => e.textContent), "0");
  await page.type("#new-name", "zero");
  await page.click("#create button[type=submit]");
  await page.waitForFunction(() => document.querySelector('[data-counter="zero"]')?.textContent === "0", { timeout: 3000 });
  assert.deepEqual(await warrenCall("Counter.Get", { name: "zero" }), { name: "zero" });
  await page.close();
});

test("the page with the token: click increment, follow warren call within 1 s", async () => {
  await warrenCall("Counter.Set", { name: "clicks", value: 0 });
  await warrenCall("Counter.Set", { name: "int64-max", value: 1 });
  await run(warren, ["call", "--token", token, srv.addr, "Counter.Set", '{"name":"int64-max","value":9223372036854775807}']);
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 860 });
  const resp = await page.goto(url, { waitUntil: "load" });
  assert.equal(resp.status(), 200);
  assert.equal(new URL(page.url()).search, "", "the token is moved out of the address bar into a cookie");
  assert.equal(await page.evaluate(() => document.cookie), "", "the cookie is HttpOnly: scripts do not see it");
  const sel = '[data-counter="clicks"]';
  await page.waitForFunction((s) => document.querySelector(s)?.textContent === "0", { timeout: 5000 }, sel);
  assert.equal(await page.$eval('[data-counter="int64-max"]', (e) => e.textContent), "9223372036854775807");

  // Click +1: the value changes on the page and on the server.
  await page.evaluate((s) => document.querySelector(s).closest(".card").querySelector('[data-action="inc"]').click(), sel);
  await page.waitForFunction((s) => document.querySelector(s)?.textContent === "1", { timeout: 3000 }, sel);
  assert.deepEqual(await warrenCall("Counter.Get", { name: "clicks" }), { name: "clicks", value: "1" });

  // Change it from warren call: the page follows within a second.
  const t0 = Date.now();
  await warrenCall("Counter.Set", { name: "clicks", value: 42 });
  await page.waitForFunction((s) => document.querySelector(s)?.textContent === "42", { timeout: 1000, polling: "mutation" }, sel);
  const followed = Date.now() - t0;
  assert.ok(followed < 1000, `followed in ${followed} ms`);

  // A counter created elsewhere appears.
  await warrenCall("Counter.Set", { name: "created-by-cli", value: 7 });
  await page.waitForFunction(() => document.querySelector('[data-counter="created-by-cli"]')?.textContent === "7", { timeout: 3000 });

  // Create and set from the page's controls.
  await page.type("#new-name", "from-page");
  await page.type("#new-value", "-5");
  await page.click("#create button[type=submit]");
  await page.waitForFunction(() => document.querySelector('[data-counter="from-page"]')?.textContent === "-5", { timeout: 3000 });
  assert.deepEqual(await warrenCall("Counter.Get", { name: "from-page" }), { name: "from-page", value: "-5" });

  // Set beyond 2^53 from the card's input, then +1 and −1: every digit kept.
  const fp = '[data-counter="from-page"]';
  const click = (action) =>
    page.evaluate((s, a) => document.querySelector(s).closest(".card").querySelector(`[data-action="${a}"]`).click(), fp, action);
  await page.type('input[aria-label="new value of from-page"]', "9007199254740993");
  await page.keyboard.press("Enter");
  await page.waitForFunction((s) => document.querySelector(s)?.textContent === "9007199254740993", { timeout: 3000 }, fp);
  assert.deepEqual(await warrenCall("Counter.Get", { name: "from-page" }), { name: "from-page", value: "9007199254740993" });
  await click("inc");
  await page.waitForFunction((s) => document.querySelector(s)?.textContent === "9007199254740994", { timeout: 3000 }, fp);
  await click("dec");
  await page.waitForFunction((s) => document.querySelector(s)?.textContent === "9007199254740993", { timeout: 3000 }, fp);
  assert.deepEqual(await warrenCall("Counter.Get", { name: "from-page" }), { name: "from-page", value: "9007199254740993" });

  // Back to zero (sent on the wire as a left-out value): the page shows 0.
  await warrenCall("Counter.Set", { name: "from-page", value: 0 });
  await page.waitForFunction((s) => document.querySelector(s)?.textContent === "0", { timeout: 1000 }, fp);
  assert.equal(await page.$eval("#banner", (e) => e.classList.contains("show")), false, "no error shown");

  // Some load for the chart, then the screenshot.
  await page.click("#load");
  await new Promise((r) => setTimeout(r, 3000));
  await page.click("#load");
  const rate = await page.$eval("#total", (e) => Number(e.textContent.replace(/\D/g, "")));
  assert.ok(rate > 100, `the load made ${rate} calls`);
  await page.screenshot({ path: join(shots, "page.png") });
  console.log(`page followed warren call in ${followed} ms; load: ${rate} calls; screenshot ${join(shots, "page.png")}`);
  await page.close();
});

test("a wrong or missing token is refused: page, HTTP, warren calls, WebSocket", async () => {
  await warrenCall("Counter.Set", { name: "clicks", value: 42 });
  const ctx = await browser.createBrowserContext(); // no cookie
  const page = await ctx.newPage();
  for (const u of [origin + "/", origin + "/?token=wrong" + token.slice(5)]) {
    const resp = await page.goto(u);
    assert.equal(resp.status(), 401, u);
    assert.match(await page.content(), /Token required/);
  }
  await page.screenshot({ path: join(shots, "refused.png") });
  await ctx.close();

  const post = (headers) =>
    fetch(origin + "/Counter.Get", { method: "POST", headers: { "content-type": "application/json", ...headers }, body: '{"name":"clicks"}' });
  assert.equal((await post({})).status, 401);
  assert.equal((await post({ authorization: "Bearer nope" })).status, 401);
  assert.equal((await post({ authorization: `Bearer ${token}` })).status, 200);

  // warren protocol over tcp: calls without the token fail, with it succeed.
  await assert.rejects(warrenCall("Counter.Get", { name: "clicks" }, null), /unauthenticated/);
  const c = await connect(srv.addr);
  await assert.rejects(c.call("Counter.Get", { name: "clicks" }), (e) => e instanceof StatusError && e.code === "unauthenticated");
  await c.close();
  const ok = await connect(srv.addr, { token });
  assert.equal((await ok.call("Counter.Get", { name: "clicks" })).value, "42");
  await ok.close();

  // WebSocket: the upgrade without the token, or with a wrong one, is
  // refused, and the client says so.
  const wsAddr = origin.replace("http", "ws") + "/";
  const tokenRefused = (e) => e.code === "unauthenticated" && /^token refused/.test(e.message);
  await assert.rejects(connect(wsAddr), tokenRefused);
  await assert.rejects(connect(wsAddr, { token: "wrong" }), tokenRefused);
  const wsOk = await connect(wsAddr, { token });
  assert.equal((await wsOk.call("Counter.Get", { name: "clicks" })).value, "42");
  await wsOk.close();
});

test("a page left open across a restart (a new token) says the token was refused, and stops reconnecting", async () => {
  const first = await startProcess(warren, ["serve", "--addr", "tcp://127.0.0.1:0"], /^listening on (\S+)[\s\S]*^open (\S+)/m);
  const addr = first.addr;
  const page = await browser.newPage();
  let second;
  try {
    await page.goto(/^open (\S+)/m.exec(first.output())[1], { waitUntil: "load" });
    await page.waitForFunction(() => document.querySelector("#status")?.classList.contains("ok"), { timeout: 5000 });
    await first.kill();
    second = await startProcess(warren, ["serve", "--addr", addr], /^listening on (\S+)[\s\S]*^open (\S+)/m);
    await page.waitForFunction(() => document.querySelector("#status")?.textContent.includes("token refused"), { timeout: 10000 });
    assert.equal(await page.$eval("#banner", (e) => e.textContent), "token refused: reload the page with the new address/token");
    await new Promise((r) => setTimeout(r, 1500));
    assert.match(await page.$eval("#status", (e) => e.textContent), /token refused/, "no reconnecting after the refusal");
    await page.screenshot({ path: join(shots, "token-refused.png") });
  } finally {
    await page.close();
    await first.kill();
    await second?.kill();
  }
});

test("a page from another origin cannot connect, even knowing the token", async () => {
  // A page served from another port (another origin) tries the WebSocket
  // with the right token, and a POST with the cookie's token.
  const other = http.createServer((req, res) => {
    res.setHeader("content-type", "text/html");
    res.end("<!doctype html><title>other origin</title><body>other</body>");
  });
  await new Promise((r) => other.listen(0, "127.0.0.1", r));
  const otherURL = `http://127.0.0.1:${other.address().port}/`;
  try {
    const page = await browser.newPage();
    await page.goto(otherURL);
    const result = await page.evaluate(
      async (wsURL, tok, target) => {
        const ws = await new Promise((resolve) => {
          const s = new WebSocket(wsURL, ["warren", "warren.bearer." + tok]);
          s.onopen = () => resolve("open");
          s.onerror = () => resolve("error");
          setTimeout(() => resolve("timeout"), 3000);
        });
        let post;
        try {
          const r = await fetch(target, { method: "POST", mode: "no-cors", credentials: "include", headers: { "content-type": "text/plain" }, body: '{"name":"clicks","value":666}' });
          post = r.type;
        } catch (e) {
          post = "error";
        }
        return { ws, post };
      },
      origin.replace("http", "ws") + "/",
      token,
      origin + "/Counter.Set",
    );
    assert.equal(result.ws, "error", "the WebSocket from another origin is refused (403)");
    assert.deepEqual(await warrenCall("Counter.Get", { name: "clicks" }), { name: "clicks", value: "42" }, "the cross-site POST changed nothing");
    await page.close();
  } finally {
    other.close();
  }
});
