// A WebSocket handshake refused for its token (issue 30): the client says
// the token was refused, with the server's reason, instead of close code 1006.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { connect, StatusError } from "../dist/node.js";
import { goBuild, startProcess } from "./helpers.mjs";

const servers = [];
after(() => Promise.all(servers.map((s) => s.kill())));

async function serve(addr) {
  const token = "t".repeat(43);
  const s = await startProcess(goBuild("./cmd/warren", "warren"), ["serve", "--addr", addr, "--token", token], /^listening on (\S+)/m);
  servers.push(s);
  return { ws: s.addr.replace(/^tcp:/, "ws:").replace(/\/?$/, "/"), token };
}

const refused = (re) => (e) => {
  assert.ok(e instanceof StatusError, String(e));
  assert.equal(e.code, "unauthenticated", e.message);
  assert.match(e.message, /^token refused by ws:\/\/127\.0\.0\.1:\d+\//);
  if (re) assert.match(e.message, re);
  return true;
};

test("ws:// on the HTTP bridge: no token or a stale one is refused with the server's reason", async () => {
  const { ws, token } = await serve("tcp://127.0.0.1:0");
  await assert.rejects(connect(ws), refused(/requires a token/));
  await assert.rejects(connect(ws, { token: "stale" + token.slice(5) }), refused(/requires a token/));
  const c = await connect(ws, { token });
  assert.equal((await c.call("Counter.Set", { name: "t", value: 1 })).value, "1");
  await c.close();
});

test("a ws:// listener: the handshake's 401 reads as token refused", async () => {
  const { ws, token } = await serve("ws://127.0.0.1:0/");
  await assert.rejects(connect(ws), refused());
  await assert.rejects(connect(ws, { token: "stale" + token.slice(5) }), refused());
  const c = await connect(ws, { token });
  await c.close();
});

test("a server that is not there is still unavailable", async () => {
  await assert.rejects(connect("ws://127.0.0.1:1/"), (e) => e.code === "unavailable");
});
