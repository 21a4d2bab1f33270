// Compiles native/crc32c.c into build/crc32c.node with the C compiler on PATH (`$CC`, else `cc`)
// and node-api-headers' headers, then loads it and checks it; a failure fails the build (prepack).
// With --install (the package's install script) it never fails: an addon already there that works
// (the prebuilt one a tarball ships) is kept, and without a compiler, headers or CRC32C instructions
// it prints one line and leaves no addon, and @cairn/core uses @node-rs/crc32's CRC32C.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "build", "crc32c.node");
const install = process.argv.includes("--install");
const require = createRequire(import.meta.url);
const { crc32cAgrees, regionChecksumsAgree } = require("../agrees.cjs");

function fallBack(reason) {
  if (!install) throw new Error(`@cairn/crc32c-native: ${reason}`);
  try {
    // Another install of this package (a concurrent one) may have built a working addon meanwhile.
    check(out);
    process.exit(0);
  } catch {
    rmSync(out, { force: true });
  }
  process.stdout.write(`@cairn/crc32c-native: ${reason}; Cairn uses @node-rs/crc32's CRC32C instead\n`);
  process.exit(0);
}

/** Throws unless the addon at `path` loads here, has every function, and passes the trust check core runs too. */
function check(path) {
  const { crc32c, readBlockChecksums, regionChecksums, adviseHugePages, readThrough } = require(path);
  // An addon built before readBlockChecksums, regionChecksums, adviseHugePages or readThrough existed is stale.
  if (typeof readBlockChecksums !== "function") throw new Error("no readBlockChecksums");
  if (typeof regionChecksums !== "function") throw new Error("no regionChecksums");
  if (typeof adviseHugePages !== "function") throw new Error("no adviseHugePages");
  if (typeof readThrough !== "function") throw new Error("no readThrough");
  if (!crc32cAgrees(crc32c)) throw new Error("wrong CRC32C on some path of its kernel");
  if (!regionChecksumsAgree(crc32c, regionChecksums)) throw new Error("wrong XXH3-128 or CRC32C in regionChecksums");
}

/** Node-API's C headers: the node-api-headers package, else the ones Node's own tarball ships. */
function includeDir() {
  try {
    return require("node-api-headers").include_dir;
  } catch {
    return join(dirname(process.execPath), "..", "include", "node");
  }
}

if (install && existsSync(out)) {
  try {
    check(out);
    process.exit(0);
  } catch {
    // Built for another platform, or stale: build it here.
  }
}
if (process.arch !== "x64" && process.arch !== "arm64") fallBack(`no CRC32C instructions known on ${process.arch}`);
if (process.platform === "win32") fallBack("not built on Windows");
const compiler = process.env.CC || "cc";
// A name of its own (with the .node extension `require` needs), so concurrent installs never load a half-written file.
const temporary = join(root, "build", `crc32c-${process.pid}.node`);
mkdirSync(dirname(out), { recursive: true });
const args = ["-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-std=gnu11", "-Wall", "-I", includeDir()];
if (process.platform === "darwin") args.push("-undefined", "dynamic_lookup");
args.push("-o", temporary, join(root, "native", "crc32c.c"));
const compiled = spawnSync(compiler, args, { encoding: "utf8" });
if (compiled.error || compiled.status !== 0) {
  rmSync(temporary, { force: true });
  const why = compiled.error ? compiled.error.message : compiled.stderr.trim().split("\n")[0];
  fallBack(`could not compile with ${compiler} (${why})`);
}
try {
  check(temporary);
} catch (error) {
  rmSync(temporary, { force: true });
  fallBack(`the compiled addon does not work here (${error.message})`);
}
renameSync(temporary, out);
process.stdout.write(`@cairn/crc32c-native: built ${out}\n`);
