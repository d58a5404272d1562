// The console page (/console/) in headless Chromium: the method list, a
// unary call through the form, a server stream followed and stopped, the
// figures moving under load (warren serve), and hostile method names,
// shapes, replies and errors shown as text (the console's test server).
// Screenshots go to test-output/browser/.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { join } from "node:path";
import puppeteer from "puppeteer-core";
import { goBuild, startProcess, ensureOutDir } from "../test/helpers.mjs";

const run = promisify(execFile);
const chromium = process.env.CHROMIUM ?? "/usr/bin/chromium";
const shots = ensureOutDir("browser");

let warren, srv, consoleURL, token, browser;

async function warrenCall(method, body) {
  const { stdout } = await run(warren, ["call", "--token", token, srv.addr, method, JSON.stringify(body)],
    { env: { ...process.env, WARREN_TOKEN: "" } });
  return JSON.parse(stdout);
}

before(async () => {
  warren = goBuild("./cmd/warren", "warren");
  srv = await startProcess(warren, ["serve", "--addr", "tcp://127.0.0.1:0"], /^listening on (\S+)[\s\S]*^open (\S+)/m);
  const open = new URL(/^open (\S+)/m.exec(srv.output())[1]);
  token = open.searchParams.get("token");
  consoleURL = open.origin + "/console/?token=" + token;
  browser = await puppeteer.launch({ executablePath: chromium, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
});

after(async () => {
  await browser?.close();
  await srv?.kill();
});

async function openConsole(url = consoleURL) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 1000 });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  // A call that fails is an HTTP error the browser also logs: not a page error.
  page.on("console", (m) => m.type() === "error" && !m.text().startsWith("Failed to load resource") && errors.push(m.text()));
  const resp = await page.goto(url, { waitUntil: "load" });
  assert.equal(resp.status(), 200);
  await page.waitForFunction(() => document.querySelectorAll("#services .method").length > 0, { timeout: 5000 });
  return { page, errors };
}

const text = (page, sel) => page.$eval(sel, (e) => e.textContent);

test("the console lists the services and methods with kinds and shapes", async () => {
  const { page, errors } = await openConsole();
  assert.equal(new URL(page.url()).search, "", "the token moves into the cookie");
  const methods = await page.$$eval("#services .method", (bs) => bs.map((b) => [b.dataset.method, b.querySelector(".kind").textContent]));
  const byName = Object.fromEntries(methods);
  assert.equal(byName["Counter.Get"], "unary");
  assert.equal(byName["Counter.Watch"], "server stream");
  assert.equal(byName["Warren.Methods"], "unary");
  await page.click('[data-method="Counter.Set"]');
  assert.equal(await text(page, "#m-name"), "Counter.Set");
  assert.equal(await text(page, "#m-req-type"), "warren.counter.v1.SetRequest");
  const fields = await page.$$eval("#m-req .f", (fs) => fs.map((f) => f.textContent));
  assert.deepEqual(fields, ["name", "value"]);
  assert.deepEqual(JSON.parse(await page.$eval("#req", (e) => e.value)), { name: "", value: "0" }, "an int64 is a string of digits");
  assert.deepEqual(await page.$$eval("#m-req .t", (ts) => ts.map((t) => t.textContent)), ["string", "int64 (string)"]);
  assert.deepEqual(errors, []);
  await page.screenshot({ path: join(shots, "console-methods.png") });
  await page.close();
});

test("a unary call through the form: reply, status and timing; an error shows its code", async () => {
  const { page, errors } = await openConsole();
  await page.click('[data-method="Counter.Set"]');
  await page.$eval("#req", (e) => (e.value = ""));
  await page.type("#req", '{"name":"form","value":"9007199254740993"}');
  await page.click("#send");
  await page.waitForFunction(() => document.querySelector("#r-code").textContent === "ok", { timeout: 5000 });
  const body = await text(page, "#r-body");
  assert.match(body, /"value": "9007199254740993"/, "every digit of an int64 kept");
  assert.match(await text(page, "#r-time"), /^\d+(\.\d)? ms$|^\d+ µs$/);
  assert.deepEqual(await warrenCall("Counter.Get", { name: "form" }), { name: "form", value: "9007199254740993" });

  await page.click('[data-method="Counter.Get"]');
  await page.$eval("#req", (e) => (e.value = '{"name":"no-such-counter"}'));
  await page.click("#send");
  await page.waitForFunction(() => document.querySelector("#r-code").textContent === "not_found", { timeout: 5000 });
  assert.equal(await page.$eval("#r-code", (e) => e.classList.contains("err")), true);

  await page.$eval("#req", (e) => (e.value = "{not json"));
  await page.click("#send");
  await page.waitForFunction(() => document.querySelector("#r-code").textContent === "invalid JSON", { timeout: 2000 });
  assert.deepEqual(errors, []);
  await page.close();
});

test("a server stream followed in the panel, then stopped", async () => {
  await warrenCall("Counter.Set", { name: "followed", value: 1 });
  const { page, errors } = await openConsole();
  await page.click('[data-method="Counter.Watch"]');
  assert.equal(await text(page, "#send"), "Follow");
  await page.$eval("#req", (e) => (e.value = '{"name":"followed"}'));
  await page.click("#send");
  await page.waitForFunction(() => document.querySelector("#r-count").textContent === "1 message", { timeout: 5000 });
  assert.equal(await text(page, "#r-code"), "streaming");
  for (let i = 0; i < 3; i++) await warrenCall("Counter.Inc", { name: "followed" });
  await page.waitForFunction(() => document.querySelector("#r-count").textContent === "4 messages", { timeout: 3000 });
  const first = await page.$eval("#r-stream li", (e) => e.textContent);
  assert.match(first, /"value":"4"/, "the newest message first");
  const inflight = async () => (await (await fetch(new URL("figures", consoleURL), { headers: { Authorization: "Bearer " + token } })).json()).in_flight;
  // The figures are a snapshot at most 250 ms old.
  for (let i = 0; i < 50 && (await inflight()) !== 1; i++) await new Promise((r) => setTimeout(r, 100));
  assert.equal(await inflight(), 1, "the stream is a call in flight");
  await page.screenshot({ path: join(shots, "console-stream.png") });
  await page.click("#stop");
  await page.waitForFunction(() => document.querySelector("#r-code").textContent === "canceled", { timeout: 3000 });
  for (let i = 0; i < 50 && (await inflight()) !== 0; i++) await new Promise((r) => setTimeout(r, 100));
  assert.equal(await inflight(), 0, "stopping the panel ends the call on the server");
  // Following again while a stream runs replaces it: the panel stays live.
  await page.click("#send");
  await page.waitForFunction(() => document.querySelector("#r-count").textContent === "1 message", { timeout: 5000 });
  await page.click("#send");
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(await text(page, "#r-code"), "streaming");
  assert.equal(await text(page, "#r-count"), "1 message");
  for (let i = 0; i < 50 && (await inflight()) !== 1; i++) await new Promise((r) => setTimeout(r, 100));
  assert.equal(await inflight(), 1, "the replaced stream's call ended");
  await page.click("#stop");
  assert.deepEqual(errors, []);
  await page.close();
});

test("the figures move under load", async () => {
  const { page, errors } = await openConsole();
  await page.waitForFunction(() => document.querySelector("#status").classList.contains("ok"), { timeout: 5000 });
  const before = Number((await text(page, "#total")).replace(/\D/g, ""));
  // 4 processes of warren call in a loop for about 4 s, over fresh connections.
  const stop = Date.now() + 4000;
  let n = 0;
  const worker = async () => {
    while (Date.now() < stop) {
      await warrenCall("Counter.Inc", { name: "load" }).catch(() => warrenCall("Counter.Set", { name: "load", value: 1 }));
      n++;
    }
  };
  const load = Promise.all([worker(), worker(), worker(), worker()]);
  await page.waitForFunction(() => Number(document.querySelector("#rate").textContent.replace(/,/g, "")) > 0, { timeout: 5000 });
  // Under load, Counter.Inc's line has a rate, a p50 and a p99.
  const row = () => [...document.querySelectorAll("#method-figures tbody tr")]
    .map((tr) => [...tr.children].map((td) => td.textContent)).find((c) => c[0] === "Counter.Inc");
  const inc = await (await page.waitForFunction(`(${row})()?.[3]?.match(/(ms|µs)$/) && (${row})()`, { timeout: 5000 })).jsonValue();
  assert.ok(Number(inc[1].replace(/,/g, "")) > 0, `Counter.Inc calls/s ${inc[1]}`);
  assert.match(inc[2], /^\d+(\.\d+)? (ms|µs)$/, `p50 ${inc[2]}`);
  assert.match(inc[3], /^\d+(\.\d+)? (ms|µs)$/, `p99 ${inc[3]}`);
  await page.screenshot({ path: join(shots, "console-figures.png") });
  await load;
  await page.waitForFunction((want) => Number(document.querySelector("#total").textContent.replace(/\D/g, "")) >= want,
    { timeout: 5000 }, before + n);
  await page.waitForFunction((want) => [...document.querySelectorAll("#method-figures tbody tr")]
    .some((tr) => tr.children[0].textContent === "Counter.Inc" && Number(tr.children[6].textContent.replace(/,/g, "")) >= want),
  { timeout: 5000 }, n);
  const points = await page.$eval("#rate-chart polyline", (e) => e.getAttribute("points").split(" ").length);
  assert.ok(points >= 3, `the chart has ${points} points`);
  const transports = await page.$$eval("#by-transport td", (tds) => tds.map((t) => t.textContent));
  assert.ok(transports.includes("tcp"), `connections by transport: ${transports}`);
  assert.deepEqual(errors, []);
  await page.close();
});

test("hostile method names, field names, replies, errors and stream messages are shown as text", async () => {
  const bin = goBuild("./internal/console/testdata/server", "console-test-server");
  const evil = await startProcess(bin, [], /^listening on (\S+)[\s\S]*^open (\S+)/m);
  try {
    const url = /^open (\S+)/m.exec(evil.output())[1];
    const { page, errors } = await openConsole(url);
    const html = "<img src=x onerror=";
    const names = await page.$$eval("#services .method", (bs) => bs.map((b) => b.dataset.method));
    const hostile = names.find((n) => n.startsWith("Evil.<img"));
    assert.ok(hostile, `the hostile method is listed: ${names}`);
    await page.evaluate((n) => [...document.querySelectorAll("#services .method")].find((b) => b.dataset.method === n).click(), hostile);
    assert.equal(await text(page, "#m-name"), hostile);
    assert.ok((await text(page, "#m-req")).includes(html), "a field name with HTML, as text");
    await page.click("#send");
    await page.waitForFunction(() => document.querySelector("#r-code").textContent === "ok", { timeout: 5000 });
    assert.ok((await text(page, "#r-body")).includes(html.replace(/"/g, '\\"')));

    // Metadata from the form reaches the handler (and comes back as text).
    await page.click('[data-method="Evil.Meta"]');
    await page.type("#md", "x-demo: <b>bold</b>");
    await page.click("#send");
    await page.waitForFunction(() => document.querySelector("#r-body").textContent.includes("<b>bold</b>"), { timeout: 5000 });
    await page.$eval("#md", (e) => (e.value = "not a header"));
    await page.click("#send");
    await page.waitForFunction(() => document.querySelector("#r-code").textContent === "invalid metadata", { timeout: 2000 });
    await page.$eval("#md", (e) => (e.value = ""));

    await page.click('[data-method="Evil.Fail"]');
    await page.click("#send");
    await page.waitForFunction(() => document.querySelector("#r-code").textContent === "failed_precondition", { timeout: 5000 });
    assert.ok((await text(page, "#r-body")).includes("<img src=x"));

    await page.click('[data-method="Evil.Ticks"]');
    await page.click("#send");
    await page.waitForFunction(() => document.querySelectorAll("#r-stream li").length >= 3, { timeout: 5000 });
    assert.ok((await text(page, "#r-stream li")).includes("<img src=x"));
    await page.click("#stop");
    // The figures list the hostile method by name, as text; a peer on the
    // unix socket is listed by its uid.
    const unix = /^unix (\S+)/m.exec(evil.output())[1];
    const watch = execFile(warren, ["call", unix, "Counter.Watch", '{"name":"w"}']);
    try {
      await page.waitForFunction((n) => [...document.querySelectorAll("#method-figures td")].some((td) => td.textContent === n),
        { timeout: 5000 }, hostile);
      await page.waitForFunction((uid) => [...document.querySelectorAll("#by-uid td")].some((td) => td.textContent === uid),
        { timeout: 5000 }, String(process.getuid()));
      const transports = await page.$$eval("#by-transport td", (tds) => tds.map((t) => t.textContent));
      assert.ok(transports.includes("unix"), `connections by transport: ${transports}`);
    } finally {
      watch.kill();
    }
    assert.equal(await page.$$eval("img", (is) => is.length), 0, "no <img> element was made from the server's data");
    assert.notEqual(await page.title(), "xss");
    await page.screenshot({ path: join(shots, "console-hostile.png") });
    assert.deepEqual(errors, []);
    await page.close();
  } finally {
    evil.proc.stdin.end();
    await evil.kill();
  }
});
