import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import { workerModules } from "../save/checksum-workers.js";
import { seededRandom } from "../testing/seeded-random.js";
import { crc32cJs } from "./crc32c-js.js";
import {
  CRC32C_IMPLEMENTATION,
  CRC32C_WORKER_MODULE,
  adviseHugePages,
  chooseCrc32cKernel,
  crc32cKernel,
} from "./crc32c-kernel.js";

/** CI=true (any value but "", "0", "false"): the addon must have built, instead of the test being skipped. */
const inCI = process.env.CI !== undefined && !["", "0", "false"].includes(process.env.CI);
const require = createRequire(import.meta.url);
const native = CRC32C_IMPLEMENTATION === "crc32c-native";
/** Where @cairn/crc32c-native has CRC32C instructions to build for (Linux or macOS on x86-64 or arm64). */
const buildable = process.platform !== "win32" && (process.arch === "x64" || process.arch === "arm64");
const nativeOnly = it.skipIf(!native && !inCI);
const CHECK = new TextEncoder().encode("123456789");

/** Lengths around every threshold of the three-stream kernel: 3 × 8 KiB and 3 × 256 B blocks, 8-byte words. */
function thresholdLengths(): number[] {
  const lengths = new Set<number>();
  for (const base of [0, 8, 3 * 256, 2 * 3 * 256, 3 * 8192, 2 * 3 * 8192, 3 * 8192 + 3 * 256])
    for (const delta of [-9, -8, -7, -1, 0, 1, 7, 8, 9]) if (base + delta >= 0) lengths.add(base + delta);
  return [...lengths];
}

describe("the Node CRC32C kernel", () => {
  it.skipIf(!buildable || (!native && !inCI))(
    "is @cairn/crc32c-native's three-stream kernel where it can build (CI fails without it; else: apt-get install gcc, then pnpm install)",
    () => {
      expect(CRC32C_IMPLEMENTATION).toBe("crc32c-native");
      expect(CRC32C_WORKER_MODULE).toBe(require.resolve("@cairn/crc32c-native"));
    },
  );

  it("gives CRC-32C's check value, whole and continued from an initial value", () => {
    expect(crc32cKernel(CHECK, 0)).toBe(0xe3069283);
    expect(crc32cKernel(CHECK.subarray(5), crc32cKernel(CHECK.subarray(0, 5), 0))).toBe(0xe3069283);
    expect(crc32cKernel(new Uint8Array(0), 0x12345678)).toBe(0x12345678);
  });

  it("matches the portable CRC32C over seeded random lengths, offsets and initial values", () => {
    const random = seededRandom(34);
    const memory = new Uint8Array(3 * 8192 * 5 + 64);
    for (let i = 0; i < memory.length; i++) memory[i] = random() * 256;
    const cases: [number, number][] = thresholdLengths().map((length, i) => [length, i % 16]);
    for (let k = 0; k < 400; k++) {
      const length = Math.floor(random() ** 2 * 100_000);
      cases.push([length, Math.floor(random() * (memory.length - length + 1))]);
    }
    for (const [length, offset] of cases) {
      const bytes = memory.subarray(offset, offset + length);
      const initial = Math.floor(random() * 2 ** 32);
      expect(crc32cKernel(bytes, initial), `${length} bytes at ${offset} from ${initial}`).toBe(
        crc32cJs(bytes, initial),
      );
      expect(crc32cKernel(bytes, 0), `${length} bytes at ${offset}`).toBe(crc32cJs(bytes));
    }
  });

  nativeOnly("reads any TypedArray or DataView from its byte offset, on a SharedArrayBuffer too", () => {
    const { crc32c } = require("@cairn/crc32c-native") as {
      crc32c: (bytes: ArrayBufferView, initial?: number) => number;
    };
    const random = seededRandom(7);
    for (const memory of [new ArrayBuffer(70_000), new SharedArrayBuffer(70_000)]) {
      const all = new Uint8Array(memory);
      for (let i = 0; i < all.length; i++) all[i] = random() * 256;
      for (const offset of [0, 8, 24, 1000, 40_000]) {
        const bytes = all.subarray(offset, offset + 26_000);
        const expected = crc32cJs(bytes);
        expect(crc32c(bytes)).toBe(expected);
        expect(crc32c(Buffer.from(memory, offset, 26_000))).toBe(expected);
        expect(crc32c(new Float64Array(memory, offset, 26_000 / 8))).toBe(expected);
        expect(crc32c(new Uint16Array(memory, offset, 26_000 / 2))).toBe(expected);
        expect(crc32c(new DataView(memory, offset, 26_000))).toBe(expected);
        expect(crc32c(bytes, 0xdeadbeef)).toBe(crc32cJs(bytes, 0xdeadbeef));
      }
    }
  });

  nativeOnly("refuses what is not a view of bytes, and an initial value that is not a number", () => {
    const { crc32c } = require("@cairn/crc32c-native") as { crc32c: (bytes: unknown, initial?: unknown) => number };
    expect(() => crc32c("123456789")).toThrow(TypeError);
    expect(() => crc32c(new ArrayBuffer(8))).toThrow(TypeError);
    expect(() => crc32c(CHECK, "1")).toThrow(TypeError);
    expect(crc32c(CHECK, undefined)).toBe(0xe3069283);
  });

  it("falls back to @node-rs/crc32 when the addon is not installed, not built, or does not load", () => {
    const missing = Object.assign((id: string) => require(id) as unknown, {
      resolve: (id: string) => {
        if (id === "@cairn/crc32c-native")
          throw Object.assign(new Error(`Cannot find module '${id}'`), { code: "MODULE_NOT_FOUND" });
        return require.resolve(id);
      },
    }) as unknown as NodeJS.Require;
    // A CPU without CRC32C instructions: the addon's path resolves, loading it throws.
    const addon = "/installed/@cairn/crc32c-native/build/crc32c.node";
    const refusing = Object.assign(
      (id: string) => {
        if (id === addon) throw new Error("this CPU has no CRC32C instructions");
        return require(id) as unknown;
      },
      { resolve: (id: string) => (id === "@cairn/crc32c-native" ? addon : require.resolve(id)) },
    ) as unknown as NodeJS.Require;
    for (const loader of [missing, refusing]) {
      const chosen = chooseCrc32cKernel(loader);
      expect(chosen.implementation).toBe("node-rs");
      expect(chosen.workerModule).toBe(require.resolve("@node-rs/crc32"));
      expect(chosen.kernel(CHECK, 0)).toBe(0xe3069283);
      expect(chosen.kernel(CHECK.subarray(3), chosen.kernel(CHECK.subarray(0, 3), 0))).toBe(0xe3069283);
    }
  });

  nativeOnly(
    "advises huge pages only for whole 2 MiB pages inside a Uint8Array, and says where the first starts",
    () => {
      const advise = adviseHugePages!;
      expect(advise).toBeTypeOf("function");
      const onLinux = process.platform === "linux";
      // WebAssembly memory: 64 KiB-aligned, untouched.
      const memory = new Uint8Array(new WebAssembly.Memory({ initial: 80, maximum: 80 }).buffer);
      const at = advise(memory);
      if (onLinux) {
        expect(at % 65_536).toBe(0);
        expect(at).toBeGreaterThanOrEqual(0);
        expect(at).toBeLessThan(2 << 20);
        // The same boundary seen from a view starting past it is the next one, 2 MiB on.
        expect(advise(memory.subarray(at + 4096))).toBe((2 << 20) - 4096);
      } else expect(at).toBe(-1);
      // Shorter than a huge page: none whole inside.
      expect(advise(memory.subarray(0, (2 << 20) - 1))).toBe(-1);
      expect(advise(new Uint8Array(0))).toBe(-1);
      expect(() => advise(new Uint32Array(8) as unknown as Uint8Array)).toThrow(TypeError);
      expect(() => (advise as (x: unknown) => number)("bytes")).toThrow(TypeError);
    },
  );

  it("is the one the checksum workers load", () => {
    expect(workerModules().crc32).toBe(CRC32C_WORKER_MODULE);
  });
});
