// Builds the script of the page that warren serve embeds
// (cmd/warren/page/app.js, next to the page's index.html): the client
// bundled with page/app.ts by esbuild (the version pinned in
// package-lock.json). The output is deterministic: CI rebuilds it and
// compares the bytes with the committed file.
//
//   npm run bundle            write ../../cmd/warren/page/app.js
//   npm run bundle -- --check fail if the committed files differ
import { build } from "esbuild";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "..", "..", "cmd", "warren", "page");
const check = process.argv.includes("--check");

const r = await build({
  entryPoints: [join(here, "app.ts")],
  bundle: true,
  format: "esm",
  target: "es2020",
  platform: "browser",
  minify: true,
  legalComments: "none",
  charset: "utf8",
  write: false,
  logLevel: "warning",
  absWorkingDir: join(here, ".."),
});
const files = { "app.js": r.outputFiles[0].contents };
let stale = [];
for (const [name, bytes] of Object.entries(files)) {
  const path = join(out, name);
  if (check) {
    let old = null;
    try {
      old = readFileSync(path);
    } catch {}
    if (!old || Buffer.compare(old, Buffer.from(bytes)) !== 0) stale.push(path);
  } else writeFileSync(path, bytes);
}
if (stale.length) {
  console.error(`stale: ${stale.join(", ")}: run npm run bundle in clients/ts and commit the result`);
  process.exit(1);
}
console.log(check ? "page bundle up to date" : `wrote ${Object.keys(files).map((f) => join(out, f)).join(", ")} (${files["app.js"].length} bytes of JS)`);
