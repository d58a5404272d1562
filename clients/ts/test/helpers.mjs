// Shared test helpers: the Go test server (clients/testserver), built once
// per run with `go build`, started on any address.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, existsSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

export const pkgDir = join(dirname(fileURLToPath(import.meta.url)), "..");
export const repoRoot = join(pkgDir, "..", "..");
export const outDir = join(pkgDir, "test-output");

let built;
/** Builds a Go command of the repository (once per process) and returns its path. */
export function goBuild(pkg, name) {
  built ??= new Map();
  if (built.has(pkg)) return built.get(pkg);
  const dir = mkdtempSync(join(tmpdir(), "warren-ts-"));
  const bin = join(dir, name);
  execFileSync("go", ["build", "-o", bin, pkg], { cwd: repoRoot, stdio: ["ignore", "inherit", "inherit"] });
  built.set(pkg, bin);
  return bin;
}

export function tempDir() {
  return mkdtempSync(join(tmpdir(), "warren-ts-"));
}

/**
 * Starts the test server on addr ("tcp://127.0.0.1:0", "unix:///...") and
 * resolves with { addr, proc, kill() } once it listens.
 */
export function startServer(addr, args = []) {
  const bin = goBuild("./clients/testserver", "testserver");
  return startProcess(bin, ["-addr", addr, "-stdin", ...args], /^listening on (\S+)/m);
}

/** Starts a process and waits for a line matching re on stdout; group 1 is the address. */
export function startProcess(bin, args, re, env = process.env) {
  const proc = spawn(bin, args, { stdio: ["pipe", "pipe", "pipe"], env });
  let out = "";
  let err = "";
  proc.stderr.on("data", (d) => (err += d));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${bin} did not start: ${out} ${err}`)), 15000);
    proc.stdout.on("data", (d) => {
      out += d;
      const m = re.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({
          addr: m[1],
          proc,
          output: () => out,
          stderr: () => err,
          kill(sig = "SIGTERM") {
            return new Promise((r) => {
              if (proc.exitCode !== null || proc.signalCode !== null) return r();
              proc.once("exit", () => r());
              proc.kill(sig);
            });
          },
        });
      }
    });
    proc.once("exit", (code) => reject(new Error(`${bin} exited with ${code}: ${out} ${err}`)));
  });
}

export function ensureOutDir(sub) {
  const d = join(outDir, sub);
  if (!existsSync(d)) mkdirSync(d, { recursive: true });
  return d;
}
