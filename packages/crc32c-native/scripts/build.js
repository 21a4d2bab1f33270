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

function fallBack(reason) {
  if (!install) throw new Error(`@cairn/crc32c-native: ${reason}`);
  rmSync(out, { force: true });
  process.stdout.write(`@cairn/crc32c-native: ${reason}; Cairn uses @node-rs/crc32's CRC32C instead\n`);
  process.exit(0);
}

/** CRC32C bit by bit: slow, but too simple to share a bug with the addon it checks. */
function bitwiseCrc32c(bytes, initial) {
  let c = ~initial;
  for (const byte of bytes) {
    c ^= byte;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0x82f63b78 & -(c & 1));
  }
  return ~c >>> 0;
}

/**
 * Throws unless the addon at `path` loads here, has every function, and agrees with a bitwise CRC32C on every path of
 * its kernel (an unaligned head, 3 × 8 KiB and 3 × 256 B blocks, words, a tail), continuing from
 * an initial value, and gives CRC32C's check value in two calls.
 */
function check(path) {
  const { crc32c, readBlockChecksums } = require(path);
  // An addon built before readBlockChecksums existed, or before it took dropCache, is stale.
  if (typeof readBlockChecksums !== "function") throw new Error("no readBlockChecksums");
  let takesDropCache = false;
  try {
    readBlockChecksums(0, new Uint8Array(0), 0, 1, new Uint32Array(0), "no");
  } catch (error) {
    takesDropCache = error instanceof TypeError;
  }
  if (!takesDropCache) throw new Error("readBlockChecksums takes no dropCache");
  const digits = Uint8Array.from("123456789", (digit) => digit.charCodeAt(0));
  if (crc32c(digits.subarray(4), crc32c(digits.subarray(0, 4))) !== 0xe3069283) throw new Error("wrong check value");
  const bytes = new Uint8Array(3 * 8192 + 3 * 256 + 8 + 3 + 1);
  for (let i = 0, x = 1; i < bytes.length; i++) bytes[i] = (x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 24;
  const view = bytes.subarray(1);
  for (const initial of [0, 0xffffffff, 0x1234567])
    if (crc32c(view, initial) !== bitwiseCrc32c(view, initial)) throw new Error("wrong CRC32C of long input");
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
