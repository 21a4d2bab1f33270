import { spawnSync } from "node:child_process";
import { Worker } from "node:worker_threads";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { seededRandom } from "../testing/seeded-random.js";
import { crc32cJs } from "./crc32c-js.js";
import { CRC32C_IMPLEMENTATION, CRC32C_WORKER_MODULE, chooseCrc32cKernel } from "./crc32c-kernel.js";

// A stale, foreign or miscompiled addon must never be trusted with every block's checksum: the
// build script and core's loader both run the package's check (agrees.cjs) on every path of the
// three-stream kernel.

/** CI=true (any value but "", "0", "false"): a missing compiler fails instead of skipping. */
const inCI = process.env.CI !== undefined && !["", "0", "false"].includes(process.env.CI);
const require = createRequire(import.meta.url);
const hasCompiler = spawnSync(process.env.CC || "cc", ["--version"]).status === 0;
const buildable = process.platform !== "win32" && (process.arch === "x64" || process.arch === "arm64");
const CHECK = new TextEncoder().encode("123456789");

/** A kernel right on short input and wrong once the 3 × 8 KiB streams start, as a bad shift table would be. */
function wrongOnLongInput(bytes: Uint8Array, initial = 0): number {
  const right = crc32cJs(bytes, initial);
  return bytes.byteLength >= 3 * 8192 ? (right ^ 1) >>> 0 : right;
}

/** A loader whose @cairn/crc32c-native resolves and loads, exporting `crc32c`. */
function loaderWith(crc32c: (bytes: Uint8Array, initial?: number) => number): NodeJS.Require {
  const addon = "/installed/@cairn/crc32c-native/build/crc32c.node";
  return Object.assign((id: string) => (id === addon ? { crc32c } : (require(id) as unknown)), {
    resolve: (id: string) => (id === "@cairn/crc32c-native" ? addon : require.resolve(id)),
  }) as unknown as NodeJS.Require;
}

describe("trusting a CRC32C addon", () => {
  it("core falls back to @node-rs/crc32 when the addon loads but is wrong on long input", () => {
    const chosen = chooseCrc32cKernel(loaderWith(wrongOnLongInput));
    expect(chosen.implementation).toBe("node-rs");
    expect(chosen.workerModule).toBe(require.resolve("@node-rs/crc32"));
    const random = seededRandom(341);
    const bytes = Uint8Array.from({ length: 3 * 8192 * 2 + 17 }, () => random() * 256);
    expect(chosen.kernel(bytes, 0)).toBe(crc32cJs(bytes));
    // Wrong only from a non-zero initial value (a chained CRC): refused too.
    const wrongWhenChained = (b: Uint8Array, initial = 0) => (initial === 0 ? crc32cJs(b) : crc32cJs(b, initial) ^ 4);
    expect(chooseCrc32cKernel(loaderWith(wrongWhenChained)).implementation).toBe("node-rs");
  });

  it("core keeps an addon that agrees", () => {
    const chosen = chooseCrc32cKernel(loaderWith((bytes, initial = 0) => crc32cJs(bytes, initial)));
    expect(chosen.implementation).toBe("crc32c-native");
    expect(chosen.kernel(CHECK, 0)).toBe(0xe3069283);
  });

  it("gives the portable CRC32C in several worker threads at once, over one shared memory (seeded)", async () => {
    const random = seededRandom(343);
    const memory = new SharedArrayBuffer(3 * 8192 * 4 + 4096);
    const all = new Uint8Array(memory);
    for (let i = 0; i < all.length; i++) all[i] = random() * 256;
    // [offset, length, initial] triples, many at the kernel's thresholds.
    const cases = Float64Array.from(
      Array.from({ length: 600 }, () => {
        const length =
          [3 * 8192, 3 * 256, 8, 3 * 8192 + 3 * 256][Math.floor(random() * 4)]! + Math.floor(random() * 40) - 20;
        const at = Math.floor(random() * (all.length - Math.max(0, length)));
        return [at, Math.max(0, length), [0, 0xffffffff, Math.floor(random() * 2 ** 32)][Math.floor(random() * 3)]!];
      }).flat(),
    );
    const source = `
      const { parentPort, workerData } = require("node:worker_threads");
      const { crc32c } = require(workerData.module);
      const bytes = new Uint8Array(workerData.memory);
      const c = workerData.cases;
      const out = [];
      for (let round = 0; round < 5; round++)
        for (let i = 0; i < c.length; i += 3) out.push(crc32c(bytes.subarray(c[i], c[i] + c[i + 1]), c[i + 2]) >>> 0);
      parentPort.postMessage(out);`;
    const results = await Promise.all(
      [0, 1, 2].map(
        () =>
          new Promise<number[]>((resolve, reject) => {
            const worker = new Worker(source, {
              eval: true,
              workerData: { module: CRC32C_WORKER_MODULE, memory, cases },
            });
            worker.once("message", (out: number[]) => void worker.terminate().then(() => resolve(out)));
            worker.once("error", reject);
          }),
      ),
    );
    const expected: number[] = [];
    for (let i = 0; i < cases.length; i += 3)
      expected.push(crc32cJs(all.subarray(cases[i]!, cases[i]! + cases[i + 1]!), cases[i + 2]!));
    for (const out of results) expect(out).toEqual([...expected, ...expected, ...expected, ...expected, ...expected]);
  }, 60_000);

  it.skipIf(CRC32C_IMPLEMENTATION !== "crc32c-native" && !inCI)(
    "reads a view of a resized buffer as its bytes now: none out of bounds, all once grown",
    () => {
      const { crc32c } = require("@cairn/crc32c-native") as { crc32c: (b: ArrayBufferView, i?: number) => number };
      type Resizable = ArrayBuffer & { resize(n: number): void };
      type Growable = SharedArrayBuffer & { grow(n: number): void };
      const memory = new (ArrayBuffer as unknown as new (n: number, o: object) => Resizable)(100_000, {
        maxByteLength: 200_000,
      });
      new Uint8Array(memory).forEach((_, i, all) => (all[i] = (i * 167 + 13) & 255));
      const fixed = new Uint8Array(memory, 1000, 50_000);
      const tracking = new Uint8Array(memory, 1000);
      const view = new DataView(memory, 500, 40_000);
      expect(crc32c(fixed, 7)).toBe(crc32cJs(fixed, 7));
      memory.resize(30_000);
      // Out of bounds: no bytes (JavaScript sees none either), never the memory past the end.
      expect(fixed.length).toBe(0);
      expect(crc32c(fixed, 7)).toBe(7);
      expect(crc32c(view, 7)).toBe(7);
      expect(crc32c(tracking, 7)).toBe(crc32cJs(new Uint8Array(memory, 1000), 7));
      const shared = new (SharedArrayBuffer as unknown as new (n: number, o: object) => Growable)(1000, {
        maxByteLength: 100_000,
      });
      const grown = new Uint8Array(shared);
      shared.grow(3 * 8192 + 1000);
      grown.fill(5, 900);
      expect(grown.length).toBe(3 * 8192 + 1000);
      expect(crc32c(grown)).toBe(crc32cJs(grown.slice()));
    },
  );

  describe.skipIf(!buildable || (!hasCompiler && !inCI))(
    "the build script (needs a C compiler: apt-get install gcc)",
    () => {
      // The workspace's package (built or not: `require.resolve` would need its addon).
      const root = fileURLToPath(new URL("../../../crc32c-native", import.meta.url));
      let copy = "";
      beforeAll(() => {
        copy = mkdtempSync(join(tmpdir(), "cairn-crc32c-build-"));
      });
      afterAll(() => rmSync(copy, { recursive: true, force: true }));
      const source = readFileSync(join(root, "native", "crc32c.c"), "utf8");
      const combine = "c0 = shift(long_shift, (uint32_t)c0) ^ c2;";
      /** The real source with the long streams' last shift forgotten: right on short input, wrong on long. */
      const miscompiled = source.replace(combine, "c0 = c0 ^ c2;");
      const addon = () => join(copy, "build", "crc32c.node");

      function build(...args: string[]) {
        return spawnSync(process.execPath, [join(copy, "scripts", "build.js"), ...args], { encoding: "utf8" });
      }
      /** Whether the addon in build/ (loaded by a fresh process: `require` caches a `.node` file) is right on long input. */
      function addonRightOnLongInput(): boolean {
        const script = `const { crc32c } = require(${JSON.stringify(addon())});
        const long = new Uint8Array(3 * 8192 + 100).fill(7);
        process.stdout.write(JSON.stringify([crc32c(new TextEncoder().encode("123456789")), crc32c(long)]));`;
        const run = spawnSync(process.execPath, ["-e", script], { encoding: "utf8" });
        expect(run.status, run.stderr).toBe(0);
        const [check, long] = JSON.parse(run.stdout) as [number, number];
        expect(check).toBe(0xe3069283);
        return long === crc32cJs(new Uint8Array(3 * 8192 + 100).fill(7));
      }

      it("refuses an addon whose three-stream path is wrong, and replaces such a stale one", () => {
        expect(miscompiled).not.toBe(source);
        cpSync(join(root, "scripts"), join(copy, "scripts"), { recursive: true });
        cpSync(join(root, "native"), join(copy, "native"), { recursive: true });
        cpSync(join(root, "package.json"), join(copy, "package.json"));
        cpSync(join(root, "agrees.cjs"), join(copy, "agrees.cjs"));
        symlinkSync(join(root, "node_modules"), join(copy, "node_modules"));
        writeFileSync(join(copy, "native", "crc32c.c"), miscompiled);

        const loud = build();
        expect(loud.status, loud.stdout + loud.stderr).not.toBe(0);
        expect(loud.stderr).toMatch(/does not work here/);
        const quiet = build("--install");
        expect(quiet.status, quiet.stderr).toBe(0);
        expect(quiet.stdout).toMatch(/uses @node-rs\/crc32/);
        expect(existsSync(addon())).toBe(false);

        const headers = (createRequire(join(root, "package.json"))("node-api-headers") as { include_dir: string })
          .include_dir;
        // A stale addon from the bad source left in build/: the install builds the right one over it.
        const compiled = spawnSync(process.env.CC || "cc", [
          ...["-O2", "-shared", "-fPIC", "-std=gnu11", "-I", headers],
          ...["-o", addon(), join(copy, "native", "crc32c.c")],
        ]);
        expect(compiled.status, String(compiled.stderr)).toBe(0);
        expect(addonRightOnLongInput()).toBe(false);
        writeFileSync(join(copy, "native", "crc32c.c"), source);
        const rebuilt = build("--install");
        expect(rebuilt.status, rebuilt.stderr).toBe(0);
        expect(rebuilt.stdout).toMatch(/built/);
        expect(addonRightOnLongInput()).toBe(true);
      }, 60_000);

      it("refuses an addon whose regionChecksums hashes a chunk of several blocks wrongly", () => {
        // Left by the test above: the right source in the copy. The XXH3 of a streamed chunk forgets its last block.
        const feed = "if (digest) XXH3_128bits_update(state, start + at, take);";
        const wrong = source.replace(
          feed,
          "if (digest && at + take < length) XXH3_128bits_update(state, start + at, take);",
        );
        expect(wrong).not.toBe(source);
        writeFileSync(join(copy, "native", "crc32c.c"), wrong);
        try {
          const loud = build();
          expect(loud.status, loud.stdout + loud.stderr).not.toBe(0);
          expect(loud.stderr).toMatch(/wrong XXH3-128/);
        } finally {
          writeFileSync(join(copy, "native", "crc32c.c"), source);
        }
        expect(addonRightOnLongInput()).toBe(true);
      }, 60_000);

      it("keeps the working addon a concurrent install built while its own compile failed", () => {
        // Left by the test above: a right addon. A "compiler" that fails after another install put one in place.
        const good = join(copy, "good.node");
        cpSync(addon(), good);
        rmSync(addon());
        const compiler = join(copy, "cc-racing.sh");
        writeFileSync(compiler, `#!/bin/sh\ncp ${JSON.stringify(good)} ${JSON.stringify(addon())}\nexit 1\n`, {
          mode: 0o755,
        });
        const raced = spawnSync(process.execPath, [join(copy, "scripts", "build.js"), "--install"], {
          encoding: "utf8",
          env: { ...process.env, CC: compiler },
        });
        expect(raced.status, raced.stderr).toBe(0);
        expect(raced.stdout).not.toMatch(/uses @node-rs\/crc32/);
        expect(existsSync(addon())).toBe(true);
        expect(addonRightOnLongInput()).toBe(true);
      }, 60_000);
    },
  );
});
