// The README's JavaScript examples, run as written: those on the "default"
// address against `warren serve` started without --addr, those naming the
// test server's address against clients/testserver there. Each must exit 0
// and print what its comments say.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync, rmSync } from "node:fs";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { join } from "node:path";
import { goBuild, pkgDir, startProcess, startServer, tempDir } from "./helpers.mjs";

const run = promisify(execFile);
const readme = readFileSync(join(pkgDir, "README.md"), "utf8");
const blocks = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
const TEST_SERVER = "unix:///tmp/warren-test.sock";

let testSrv, serve;
const xdg = tempDir();
before(async () => {
  // The address the README names for the test server is replaced by a private one.
  testSrv = await startServer(`unix://${join(tempDir(), "readme.sock")}`);
  serve = await startProcess(goBuild("./cmd/warren", "warren"), ["serve"], /^listening on (\S+)/m, { ...process.env, XDG_RUNTIME_DIR: xdg });
});
after(async () => {
  await testSrv?.kill();
  await serve?.kill();
});

test("the README has JavaScript examples, each on warren serve or the test server", () => {
  assert.ok(blocks.length >= 4);
  for (const code of blocks) assert.ok(code.includes('connect("default")') !== code.includes(TEST_SERVER), code);
});

blocks.forEach((code, i) => {
  test(`README example ${i + 1}`, async () => {
    const file = join(pkgDir, `.readme-example-${i}.mjs`); // inside the package: "@warrenipc/client" resolves to itself
    writeFileSync(file, code.replaceAll(TEST_SERVER, testSrv.addr));
    try {
      const { stdout } = await run(process.execPath, [file], { timeout: 20000, env: { ...process.env, XDG_RUNTIME_DIR: xdg } });
      for (const m of code.matchAll(/console\.log\(.*\); \/\/ (.*)$/gm)) {
        assert.ok(stdout.includes(m[1].trim()), `output ${JSON.stringify(stdout)} lacks ${m[1]}`);
      }
    } finally {
      rmSync(file, { force: true });
    }
  });
});
