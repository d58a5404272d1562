// The counter page served by `warren serve` at GET /: lists the counters,
// follows each with Counter.Watch over one WebSocket connection, creates,
// increments and sets them, and charts calls/s and round-trip latency.
import { connect, StatusError, type Client } from "../src/browser.js";

// The counter speaks the protobuf JSON mapping: int64 values arrive as
// strings (exact beyond 2^53), and a value of 0 is left out.
type Counter = { name: string; value?: string | number | bigint };

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const grid = $("counters");
const cards = new Map<string, { el: HTMLElement; value: HTMLElement; watch: AbortController }>();

let client: Client | null = null;

// ---- stats ----
let callsThisSecond = 0;
let totalCalls = 0;
let rttsThisSecond: number[] = [];
const rateSeries: number[] = new Array(60).fill(0);
const rttSeries: number[] = new Array(60).fill(0);

/** Runs a call, counting it and its round trip. */
async function timed<T>(f: () => Promise<T>): Promise<T> {
  const t0 = performance.now();
  const r = await f();
  callsThisSecond++;
  totalCalls++;
  rttsThisSecond.push(performance.now() - t0);
  return r;
}

function drawChart(svg: SVGSVGElement, data: number[], color: string) {
  const max = Math.max(...data, 1e-9) * 1.15;
  const w = 300;
  const h = 56;
  const step = w / (data.length - 1);
  const pts = data.map((v, i) => `${(i * step).toFixed(1)},${(h - 2 - (v / max) * (h - 6)).toFixed(1)}`);
  svg.innerHTML =
    `<defs><linearGradient id="g-${svg.id}" x1="0" x2="0" y1="0" y2="1"><stop offset="0" stop-color="${color}" stop-opacity=".35"/><stop offset="1" stop-color="${color}" stop-opacity="0"/></linearGradient></defs>` +
    `<polygon fill="url(#g-${svg.id})" points="0,${h} ${pts.join(" ")} ${w},${h}"/>` +
    `<polyline fill="none" stroke="${color}" stroke-width="2" stroke-linejoin="round" vector-effect="non-scaling-stroke" points="${pts.join(" ")}"/>`;
}

function fmt(n: number): string {
  return n >= 10000 ? Math.round(n).toLocaleString("en-US") : n >= 100 ? n.toFixed(0) : n.toFixed(n >= 10 ? 1 : 2);
}

function tick() {
  rateSeries.shift();
  rateSeries.push(callsThisSecond);
  const sorted = rttsThisSecond.sort((a, b) => a - b);
  const p50 = sorted.length ? sorted[Math.floor(sorted.length / 2)] : 0;
  const p99 = sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))] : 0;
  rttSeries.shift();
  rttSeries.push(p50);
  $("rate").firstChild!.textContent = Math.round(callsThisSecond).toLocaleString("en-US");
  $("rtt").firstChild!.textContent = sorted.length ? fmt(p50) : "–";
  $("p99").textContent = sorted.length ? `p99 ${fmt(p99)} ms` : "";
  $("total").textContent = `${totalCalls.toLocaleString("en-US")} calls`;
  drawChart($("rate-chart") as unknown as SVGSVGElement, rateSeries, "#4fc3a1");
  drawChart($("rtt-chart") as unknown as SVGSVGElement, rttSeries, "#6aa9ff");
  callsThisSecond = 0;
  rttsThisSecond = [];
}

// ---- counters ----

function showError(e: unknown) {
  const b = $("banner");
  b.textContent = e instanceof StatusError ? `${e.code}: ${e.message}` : String(e);
  b.classList.add("show");
  clearTimeout((showError as any).t);
  (showError as any).t = setTimeout(() => b.classList.contains("stay") || b.classList.remove("show"), 6000);
}

/** Parses what the user typed as an int64, in the protobuf JSON form (a decimal string). */
function parseInt64(s: string): string | null {
  s = s.trim().replace(/^\+/, "");
  if (s === "") return "0";
  if (!/^-?\d{1,19}$/.test(s)) return null;
  const b = BigInt(s);
  if (b > 2n ** 63n - 1n || b < -(2n ** 63n)) return null;
  return b.toString();
}

function render(c: Counter) {
  let card = cards.get(c.name);
  if (!card) card = addCard(c.name);
  const text = String(c.value ?? 0);
  if (card.value.textContent !== text) {
    card.value.textContent = text;
    card.value.classList.toggle("long", text.length > 10);
    card.el.classList.remove("flash");
    void card.el.offsetWidth;
    card.el.classList.add("flash");
    setTimeout(() => card!.el.classList.remove("flash"), 120);
  }
}

function addCard(name: string) {
  const el = document.createElement("div");
  el.className = "card counter";
  const title = document.createElement("div");
  title.className = "name";
  title.textContent = name;
  title.title = name;
  const value = document.createElement("div");
  value.className = "value";
  value.dataset.counter = name;
  value.textContent = "…";
  const row = document.createElement("div");
  row.className = "row";
  const inc = button("+1", "inc", () => call("Counter.Inc", { name }));
  const dec = button("−1", "dec", () => call("Counter.Inc", { name, by: -1 }));
  inc.style.flex = dec.style.flex = "1";
  const input = document.createElement("input");
  input.placeholder = "set to…";
  input.inputMode = "numeric";
  input.setAttribute("aria-label", `new value of ${name}`);
  const set = button("Set", "set", () => {
    const v = parseInt64(input.value);
    if (v === null) return showError(`"${input.value}" is not a 64-bit integer`);
    input.value = "";
    return call("Counter.Set", { name, value: v });
  });
  input.addEventListener("keydown", (ev) => ev.key === "Enter" && set.click());
  row.append(inc, dec);
  const row2 = document.createElement("div");
  row2.className = "row";
  row2.append(input, set);
  el.append(title, value, row, row2);
  // Keep the cards sorted by name.
  const after = [...cards.keys()].filter((k) => k > name).sort()[0];
  grid.insertBefore(el, after ? cards.get(after)!.el : null);
  const watch = new AbortController();
  const card = { el, value, watch };
  cards.set(name, card);
  $("n").textContent = String(cards.size);
  $("empty").style.display = "none";
  void follow(name, watch.signal);
  return card;
}

function button(label: string, action: string, f: () => unknown) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.dataset.action = action;
  b.addEventListener("click", () => void f());
  return b;
}

async function call(method: string, req: unknown) {
  if (!client) return showError("not connected");
  try {
    const c = await timed(() => client!.call<unknown, Counter>(method, req));
    render(c);
  } catch (e) {
    showError(e);
  }
}

/** Follows a counter with Counter.Watch for as long as the connection lasts. */
async function follow(name: string, signal: AbortSignal) {
  const c = client;
  if (!c) return;
  try {
    for await (const m of c.stream<unknown, Counter>("Counter.Watch", { name }, { signal })) render(m);
  } catch (e) {
    if (!signal.aborted && (e as StatusError).code !== "unavailable" && (e as StatusError).code !== "canceled") showError(e);
  }
}

/** Discovers counters created elsewhere. */
async function refresh() {
  if (!client) return;
  try {
    // An empty list arrives as {}.
    const r = await timed(() => client!.call<unknown, { counters?: Counter[] }>("Counter.List", {}));
    for (const c of r.counters ?? []) if (!cards.has(c.name)) render(c);
  } catch (e) {
    if ((e as StatusError).code !== "unavailable") showError(e);
  }
}

// ---- load ----
let loading = false;
async function loadLoop() {
  const names = [...cards.keys()];
  const name = names[0] ?? "load";
  if (!cards.has(name) && client) await call("Counter.Set", { name, value: 0 });
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (loading && client) {
        try {
          await timed(() => client!.call("Counter.Get", { name }));
        } catch {
          await new Promise((r) => setTimeout(r, 200));
        }
      }
    }),
  );
}

// ---- connection ----

// The token of a URL that still carries it. Otherwise the server keeps it
// in an HttpOnly cookie that scripts cannot read and the browser sends with
// the WebSocket upgrade.
function token(): string | undefined {
  return new URLSearchParams(location.search).get("token") ?? undefined;
}

type BuildInfo = { version?: string; revision?: string; time?: string; modified?: boolean; go?: string };

/** Shows the server's build (the version object of Warren.Methods) in the footer. */
async function showVersion() {
  try {
    const r = await client!.call<unknown, { version?: BuildInfo }>("Warren.Methods", {});
    const v = r.version;
    if (!v) return;
    let text = `warren ${v.version ?? "(unknown)"}`;
    if (v.revision) text += ` · ${v.revision.slice(0, 12)}${v.modified ? "+" : ""}`;
    if (v.time) text += ` · ${v.time}`;
    if (v.go) text += ` · ${v.go}`;
    $("version").textContent = text;
  } catch {}
}

function setStatus(cls: string, text: string) {
  const s = $("status");
  s.className = `pill ${cls}`;
  s.lastElementChild!.textContent = text;
}

async function run() {
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/`;
  $("addr").textContent = location.host;
  let delay = 250;
  for (;;) {
    setStatus("", "connecting");
    try {
      client = await connect(url, { token: token() });
      delay = 250;
      setStatus("ok", "live");
      $("banner").classList.remove("show");
      for (const [, card] of cards) void follow(card.value.dataset.counter!, card.watch.signal);
      await refresh();
      void showVersion();
      const pinger = setInterval(async () => {
        try {
          rttsThisSecond.push(await client!.ping());
        } catch {}
      }, 250);
      const lister = setInterval(refresh, 1000);
      await client.closed;
      clearInterval(pinger);
      clearInterval(lister);
    } catch (e) {
      if (e instanceof StatusError && e.code === "unauthenticated") {
        // A server restarted with a new token, or a URL without one:
        // reconnecting would be refused again.
        client = null;
        setStatus("bad", "token refused");
        const b = $("banner");
        b.textContent = "token refused: reload the page with the new address/token";
        b.classList.add("show", "stay");
        return;
      }
      showError(e);
    }
    client = null;
    setStatus("bad", "reconnecting");
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 5000);
  }
}

$("create").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const name = ($("new-name") as HTMLInputElement).value.trim();
  const v = parseInt64(($("new-value") as HTMLInputElement).value);
  if (!name) return;
  if (v === null) return showError("the value must be a 64-bit integer");
  ($("new-name") as HTMLInputElement).value = "";
  ($("new-value") as HTMLInputElement).value = "";
  void call("Counter.Set", { name, value: v });
});

$("load").addEventListener("click", () => {
  loading = !loading;
  const b = $("load");
  b.textContent = loading ? "Stop load" : "Start load";
  b.classList.toggle("on", loading);
  if (loading) void loadLoop();
});

setInterval(tick, 1000);
tick();
void run();
