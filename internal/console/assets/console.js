// The console page of a warren server. Everything the server sends (method
// names, shapes, replies, errors, figures) is put into the page as text
// (textContent, createTextNode, attribute values): never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";

// el builds an element; string children become text nodes.
function el(tag, cls, ...kids) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

function banner(msg) {
  const b = $("banner");
  b.textContent = msg || "";
  b.classList.toggle("show", !!msg);
}

function setStatus(ok, text) {
  $("status").className = "pill " + (ok ? "ok" : "bad");
  $("status-text").textContent = text;
}

// pretty re-indents JSON text without parsing its numbers (a 64-bit integer
// keeps every digit).
function pretty(text) {
  let out = "", ind = 0, str = false, esc = false;
  const nl = () => "\n" + "  ".repeat(ind);
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (str) {
      out += c;
      if (esc) esc = false;
      else if (c === "\\") esc = true;
      else if (c === '"') str = false;
      continue;
    }
    if (c === " " || c === "\n" || c === "\r" || c === "\t") continue;
    if (c === '"') { str = true; out += c; continue; }
    if (c === "{" || c === "[") {
      const close = c === "{" ? "}" : "]";
      let j = i + 1;
      while (j < text.length && " \n\r\t".includes(text[j])) j++;
      if (text[j] === close) { out += c + close; i = j; continue; }
      ind++; out += c + nl(); continue;
    }
    if (c === "}" || c === "]") { ind = Math.max(0, ind - 1); out += nl() + c; continue; }
    if (c === ",") { out += "," + nl(); continue; }
    if (c === ":") { out += ": "; continue; }
    out += c;
  }
  return out;
}

const fmt = (n) => (n >= 100 ? Math.round(n).toLocaleString("en-US") : n >= 10 ? n.toFixed(1) : n.toFixed(2));
const ms = (v) => (v == null ? "–" : v >= 100 ? Math.round(v) + " ms" : v >= 1 ? v.toFixed(1) + " ms" : Math.round(v * 1000) + " µs");

// ---- methods ----

let methods = [];
let current = null;

async function loadMethods() {
  const r = await fetch("/Warren.Methods", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
  const text = await r.text();
  if (!r.ok) throw new Error(errorText(r.status, text));
  const list = JSON.parse(text);
  methods = list.methods || [];
  const v = list.version;
  if (v) $("version").textContent = "warren " + v.version + (v.revision ? " · " + v.revision.slice(0, 12) : "") + " · " + v.go;
  $("n-methods").textContent = String(methods.length);
  renderMethods();
  let want = "";
  try { want = decodeURIComponent(location.hash.slice(1)); } catch { /* a malformed address: no method chosen */ }
  const m = methods.find((x) => x.name === want);
  if (m) choose(m);
}

// serviceOf is the part before the first dot, as the server reads a name.
function serviceOf(name) {
  const i = name.indexOf(".");
  return i > 0 ? name.slice(0, i) : name;
}

function renderMethods() {
  const f = $("filter").value.trim().toLowerCase();
  const box = $("services");
  box.replaceChildren();
  let last = null;
  for (const m of methods) {
    if (f && !m.name.toLowerCase().includes(f)) continue;
    const svc = serviceOf(m.name);
    if (svc !== last) { box.append(el("div", "service", svc)); last = svc; }
    const b = el("button", "method", el("span", "n", m.name.slice(svc.length + 1)), el("span", "kind " + m.kind, m.kind.replace("_", " ")));
    b.type = "button";
    b.dataset.method = m.name;
    b.title = m.name;
    if (current && current.name === m.name) b.classList.add("sel");
    b.addEventListener("click", () => choose(m));
    box.append(b);
  }
}

function typeName(s) {
  if (!s) return "";
  if (s.type === "array") return (s.elem ? typeName(s.elem) : "any") + "[]";
  if (s.type === "object" && s.elem) return "map<string, " + typeName(s.elem) + ">";
  if (s.type === "string" && (s.go === "int64" || s.go === "uint64")) return s.go + " (string)";
  return s.proto || (s.type === "object" && s.go) || s.type;
}

// shapeTree shows a shape's fields as nested lists, down to depth 4.
function shapeTree(s, depth = 0) {
  const ul = el("ul");
  for (const f of (s && s.fields) || []) {
    const li = el("li", null, el("span", "f", f.name), el("span", "t", typeName(f.shape)));
    let inner = f.shape;
    while (inner && inner.type === "array" && inner.elem) inner = inner.elem;
    if (inner && inner.fields && inner.fields.length && depth < 4) li.append(shapeTree(inner, depth + 1));
    ul.append(li);
  }
  if (!ul.childElementCount) ul.append(el("li", "dim", s && s.type === "object" ? "(no fields)" : typeName(s)));
  return ul;
}

// sample is a request skeleton for a shape.
function sample(s, depth = 0) {
  if (!s) return null;
  switch (s.type) {
    case "object":
      if (s.elem || depth > 2) return {};
      return Object.fromEntries((s.fields || []).map((f) => [f.name, sample(f.shape, depth + 1)]));
    case "array": return [];
    case "string": return s.go === "int64" || s.go === "uint64" ? "0" : "";
    case "bytes": return "";
    case "integer": case "number": return 0;
    case "boolean": return false;
    default: return null;
  }
}

const drafts = new Map(); // method -> request text the user typed

function choose(m) {
  if (current) drafts.set(current.name, $("req").value);
  stopStream();
  current = m;
  history.replaceState(null, "", "#" + encodeURIComponent(m.name));
  $("pick").hidden = true;
  $("chosen").hidden = false;
  $("m-name").textContent = m.name;
  $("m-kind").textContent = m.kind.replace("_", " ");
  $("m-kind").className = "kind " + m.kind;
  $("m-req-type").textContent = typeName(m.request);
  $("m-resp-type").textContent = typeName(m.reply);
  $("m-req").replaceChildren(shapeTree(m.request));
  $("m-resp").replaceChildren(shapeTree(m.reply));
  $("req").value = drafts.get(m.name) ?? JSON.stringify(sample(m.request), null, 2);
  const callable = m.kind === "unary" || m.kind === "server_stream";
  $("send").disabled = !callable;
  $("send").textContent = m.kind === "server_stream" ? "Follow" : "Call";
  $("not-callable").textContent = callable ? "" : "client and bidi streams are called from a client, not from the console";
  $("result").hidden = true;
  renderMethods();
}

// ---- calls ----

function errorText(httpStatus, text) {
  try {
    const e = JSON.parse(text);
    if (e && e.code) return e.code + (e.message ? ": " + e.message : "");
  } catch { /* not JSON */ }
  return "HTTP " + httpStatus + (text ? ": " + text.slice(0, 500) : "");
}

function showResult(code, took, body) {
  $("result").hidden = false;
  const c = $("r-code");
  c.textContent = code;
  c.className = "code " + (code === "ok" ? "" : code === "streaming" ? "run" : "err");
  $("r-time").textContent = took == null ? "" : ms(took);
  $("r-body").textContent = body;
}

async function callUnary(m, body, headers) {
  $("r-stream").replaceChildren();
  $("r-count").textContent = "";
  const t0 = performance.now();
  let r, text;
  try {
    r = await fetch("/" + encodeURIComponent(m.name), { method: "POST", headers, body });
    text = await r.text();
  } catch (e) {
    showResult("unavailable", performance.now() - t0, String(e));
    return;
  }
  const took = performance.now() - t0;
  if (r.ok) showResult("ok", took, pretty(text));
  else {
    const msg = errorText(r.status, text);
    const i = msg.indexOf(": ");
    showResult(i > 0 && !msg.startsWith("HTTP") ? msg.slice(0, i) : "error", took, i > 0 ? msg.slice(i + 2) : msg);
  }
}

let streamAbort = null;
const maxLines = 500;

// stopStream ends the stream followed, if any; byUser: from the Stop button
// (its panel then says so; a stream replaced by another says nothing).
function stopStream(byUser = false) {
  if (streamAbort) {
    streamAbort.byUser = byUser;
    streamAbort.abort();
  }
  streamAbort = null;
  $("stop").disabled = true;
}

async function follow(m, body, headers) {
  stopStream();
  const ab = new AbortController();
  streamAbort = ab;
  $("stop").disabled = false;
  const list = $("r-stream");
  list.replaceChildren();
  let n = 0;
  const t0 = performance.now();
  showResult("streaming", null, "");
  $("r-count").textContent = "0 messages";
  try {
    const r = await fetch("stream?method=" + encodeURIComponent(m.name),
      { method: "POST", headers, body, signal: ab.signal });
    if (!r.ok) {
      const msg = errorText(r.status, await r.text());
      const i = msg.indexOf(": ");
      showResult(i > 0 ? msg.slice(0, i) : "error", performance.now() - t0, i > 0 ? msg.slice(i + 2) : msg);
      return;
    }
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (!line) continue;
        // {"message": ...} or the end {"code", "message", "ms"}: the
        // message's own text is shown as received.
        if (line.startsWith('{"message":')) {
          n++;
          const at = ((performance.now() - t0) / 1000).toFixed(3) + " s";
          list.prepend(el("li", null, el("span", "dim", "#" + n + " " + at), line.slice(11, -1)));
          while (list.childElementCount > maxLines) list.lastElementChild.remove();
          $("r-count").textContent = n + (n === 1 ? " message" : " messages");
        } else {
          const end = JSON.parse(line);
          showResult(end.code, end.ms, end.message || "");
        }
      }
    }
  } catch (e) {
    if (!ab.signal.aborted) showResult("unavailable", performance.now() - t0, String(e));
    else if (ab.byUser) showResult("canceled", performance.now() - t0, "stopped from the console");
  } finally {
    if (streamAbort === ab) { streamAbort = null; $("stop").disabled = true; }
  }
}

// metadata reads the metadata box: "key: value" lines, sent as headers
// (the server makes them the call's metadata).
function metadata() {
  const h = { "Content-Type": "application/json" };
  for (const line of $("md").value.split("\n")) {
    if (!line.trim()) continue;
    const i = line.indexOf(":");
    if (i <= 0) throw new Error("metadata line " + JSON.stringify(line) + " is not key: value");
    const k = line.slice(0, i).trim(), v = line.slice(i + 1).trim();
    if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(k)) throw new Error("metadata key " + JSON.stringify(k) + " is not a header name");
    h[k] = h[k] === undefined ? v : h[k] + ", " + v;
  }
  return h;
}

$("call-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const m = current;
  if (!m) return;
  const body = $("req").value.trim() || "{}";
  let headers;
  try { JSON.parse(body); } catch (e) {
    showResult("invalid JSON", null, String(e.message || e));
    return;
  }
  try { headers = metadata(); } catch (e) {
    showResult("invalid metadata", null, String(e.message || e));
    return;
  }
  if (m.kind === "server_stream") follow(m, body, headers);
  else if (m.kind === "unary") callUnary(m, body, headers);
});
$("stop").addEventListener("click", () => stopStream(true));
$("filter").addEventListener("input", renderMethods);

// ---- figures ----

const history60 = [];

function spark(svg, values) {
  // The newest value at the right edge, one step per second.
  const max = Math.max(1, ...values);
  const x = (i) => ((60 - values.length + i) * 300 / 59).toFixed(1);
  const pts = values.map((v, i) => x(i) + "," + (46 - (v / max) * 42).toFixed(1)).join(" ");
  const area = document.createElementNS(SVG, "polygon");
  area.setAttribute("points", values.length ? x(0) + ",48 " + pts + " 300,48" : "");
  area.setAttribute("fill", "rgba(79,195,161,.15)");
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", pts);
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#4fc3a1");
  line.setAttribute("stroke-width", "2");
  svg.replaceChildren(area, line);
}

function rows(tbody, items, cells) {
  const trs = items.map((it) => el("tr", null, ...cells(it).map((c) => el("td", null, c))));
  tbody.replaceChildren(...trs);
}

function setNum(id, v, hot) {
  const e = $(id);
  e.textContent = Number(v).toLocaleString("en-US");
  if (hot !== undefined) e.classList.toggle("hot", hot);
}

const sum = (rows) => rows.reduce((a, r) => a + r.n, 0);
const reasons = (id, rows) =>
  $(id).replaceChildren(...rows.map((r) => el("tr", null, el("td", null, r.key.replace(/_/g, " ")), el("td", null, r.n.toLocaleString("en-US")))));
let prevRefusals = null;

async function pollFigures() {
  try {
    const r = await fetch("figures", { cache: "no-store" });
    const text = await r.text();
    if (!r.ok) throw new Error(errorText(r.status, text));
    const f = JSON.parse(text);
    setStatus(true, "live");
    banner("");
    $("rate").textContent = fmt(f.calls_per_sec);
    history60.push(f.calls_per_sec);
    if (history60.length > 60) history60.shift();
    spark($("rate-chart"), history60);
    setNum("total", f.calls);
    setNum("inflight", f.in_flight);
    $("errors").textContent = fmt(f.errors_per_sec);
    setNum("conns", f.conns);
    const refusals = sum(f.calls_refused) + sum(f.conns_refused) + sum(f.shed);
    const rising = prevRefusals !== null && refusals > prevRefusals;
    prevRefusals = refusals;
    setNum("refused", sum(f.calls_refused), rising);
    setNum("rejected", sum(f.conns_refused), rising);
    setNum("shed", sum(f.shed), rising);
    reasons("refused-why", f.calls_refused);
    reasons("rejected-why", f.conns_refused);
    reasons("shed-why", f.shed);
    $("by-transport").replaceChildren(...f.by_transport.map((x) => el("tr", null, el("td", null, x.key), el("td", null, String(x.n)))));
    rows($("by-uid").tBodies[0], f.by_uid, (x) => [x.key, String(x.n)]);
    $("no-uids").hidden = f.by_uid.length > 0;
    rows($("method-figures").tBodies[0], f.methods, (m) =>
      [m.name, fmt(m.per_sec), ms(m.p50_ms), ms(m.p99_ms), fmt(m.errors_per_sec), String(m.in_flight), Number(m.calls).toLocaleString("en-US")]);
    $("no-method-figures").hidden = f.methods.length > 0;
  } catch (e) {
    setStatus(false, "no figures");
    banner("figures: " + (e.message || e));
  }
}

$("host").textContent = location.host;
loadMethods().then(() => setStatus(true, "live")).catch((e) => { setStatus(false, "error"); banner("methods: " + (e.message || e)); });
pollFigures();
setInterval(pollFigures, 1000);
