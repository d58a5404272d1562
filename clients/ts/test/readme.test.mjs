// The README's JavaScript examples, run against the Go test server: each
// must exit 0 and print what its comments say.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync, rmSync } from "node:fs";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { join } from "node:path";
import { pkgDir, startServer, tempDir } from "./helpers.mjs";

const run = promisify(execFile);
const readme = readFileSync(join(pkgDir, "README.md"), "utf8");
const blocks = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);

let srv;
before(async () => {
  srv = await startServer(`unix://${join(tempDir(), "readme.sock")}`);
});
after(() => srv?.kill());

test("the README has JavaScript examples", () => assert.ok(blocks.length >= 3));

blocks.forEach((code, i) => {
  test(`README example ${i + 1}`, async () => {
    const file = join(pkgDir, `.readme-example-${i}.mjs`); // inside the package: "@warrenipc/client" resolves to itself
    writeFileSync(file, code.replaceAll("unix:///tmp/warren-example.sock", srv.addr));
    try {
      const { stdout } = await run(process.execPath, [file], { timeout: 20000 });
      for (const m of code.matchAll(/console\.log\(.*\); \/\/ (.*)$/gm)) {
        assert.ok(stdout.includes(m[1].trim()), `output ${JSON.stringify(stdout)} lacks ${m[1]}`);
      }
    } finally {
      rmSync(file, { force: true });
    }
  });
});
