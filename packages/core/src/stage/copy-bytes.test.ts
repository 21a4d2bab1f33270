import { Buffer } from "node:buffer";
import { describe, expect, it } from "vitest";
import { sharedBytes } from "../storage/page-aligned.js";
import { CopyChooser } from "./copy-bytes.js";

/** A clock for the chooser: each copy it times takes `memcpy` or `set` ms, in the order it tries them (memcpy first). */
function scriptedClock(ms: { memcpy: number; set: number }): () => number {
  let calls = 0;
  let now = 0;
  return () => {
    // Calls come in pairs (start, end); trials alternate memcpy, set, memcpy, …
    const end = calls % 2 === 1;
    const method = Math.floor(calls / 2) % 2 === 0 ? "memcpy" : "set";
    calls++;
    if (end) now += ms[method];
    return now;
  };
}

/** Bytes numbered from `seed`, so a copy from or to the wrong place shows. */
function numbered(bytes: number, seed: number): Uint8Array {
  const out = new Uint8Array(bytes);
  for (let i = 0; i < bytes; i++) out[i] = (i * 7 + seed) & 0xff;
  return out;
}

/** Copies `bytes` at an odd offset into shared memory full of 0xee and checks every byte of the target. */
function checkCopy(chooser: CopyChooser, bytes: number, offset: number, sourceOffset: number): void {
  const target = sharedBytes(offset + bytes + 4099).fill(0xee);
  const view = target.subarray(3); // a view not at its buffer's start
  const backing = numbered(sourceOffset + bytes + 5, 11);
  const source = backing.subarray(sourceOffset, sourceOffset + bytes);
  chooser.copy(view, offset, source);
  const expected = new Uint8Array(target.byteLength).fill(0xee);
  expected.set(source, 3 + offset);
  expect(Buffer.from(target).equals(Buffer.from(expected)), `${bytes} bytes at ${offset} from ${sourceOffset}`).toBe(
    true,
  );
}

describe("copies into staging memory", () => {
  it.each([
    ["memcpy", { memcpy: 1, set: 3 }],
    ["set", { memcpy: 3, set: 1 }],
  ] as const)("chooses %s when it measured faster, and copies every byte where it belongs", (method, ms) => {
    const clock = scriptedClock(ms);
    const chooser = new CopyChooser(clock, clock);
    // Trials: both methods, at odd offsets and lengths, source and target aligned alike (the view starts at 3).
    for (let i = 0; i < 64; i++) checkCopy(chooser, (16 << 10) + 2 * i + 1, 4096 * i + 8 * i + 5, 0);
    expect(chooser.chosen.get("medium")).toBe(method);
    // Chosen: every copy by that method.
    for (const [bytes, offset, from] of [
      [(16 << 10) + 1, 5, 0],
      [(64 << 10) + 5, 4093, 0],
      [1 << 20, 133, 0],
      [(1 << 20) + 3, 7, 5],
    ] as const)
      checkCopy(chooser, bytes, offset, from);
  });

  it("copies by memcpy, untimed, where source and target are not aligned alike (set would copy byte by byte)", () => {
    const clock = scriptedClock({ memcpy: 3, set: 1 });
    const chooser = new CopyChooser(clock, clock);
    for (const [bytes, offset, from] of [
      [(16 << 10) + 1, 0, 1],
      [(64 << 10) + 4, 4, 0],
      [1 << 20, 136, 2],
      [(1 << 20) + 3, 7, 5],
    ] as const)
      checkCopy(chooser, bytes, offset, from);
    expect(chooser.chosen.size).toBe(0);
  });

  it("chooses separately for large copies by the target's place in its page", () => {
    const clock = scriptedClock({ memcpy: 1, set: 2 });
    const chooser = new CopyChooser(clock, clock);
    const bytes = 32 << 20;
    const source = numbered(bytes, 5);
    const target = sharedBytes(bytes + 8192);
    for (let i = 0; i < 4; i++) chooser.copy(target, 136, source);
    expect(chooser.chosen.get("large@0")).toBe("memcpy");
    expect(chooser.chosen.get("large@1")).toBeUndefined();
    chooser.copy(target, 4096 + 600, source);
    expect(chooser.chosen.get("large@1")).toBeUndefined();
    expect(Buffer.from(target.subarray(4096 + 600, 4096 + 600 + bytes)).equals(Buffer.from(source))).toBe(true);
    expect(target[4096 + 599]).toBe(source[4096 + 599 - 136]);
  });

  it.each([
    ["plainly (2× at 30 ms)", { memcpy: 30, set: 60 }, 2, "memcpy"],
    ["plainly the other way (3× at 40 ms)", { memcpy: 120, set: 40 }, 2, "set"],
    ["nearly alike (1.2×)", { memcpy: 30, set: 36 }, 4, "memcpy"],
    ["by more than page faults could explain away (10×)", { memcpy: 300, set: 30 }, 4, "set"],
    ["too short to time (2× at 5 ms)", { memcpy: 5, set: 10 }, 4, "memcpy"],
  ] as const)("chooses a large kind after one copy each way only when they differ %s", (_, ms, copies, method) => {
    const clock = scriptedClock(ms);
    const chooser = new CopyChooser(clock, clock);
    const bytes = 32 << 20;
    const source = numbered(bytes, 9);
    const target = sharedBytes(bytes + 8192);
    for (let i = 1; i <= copies; i++) {
      expect(chooser.chosen.get("large@0")).toBeUndefined();
      chooser.copy(target, 8 * i, source);
      expect(Buffer.from(target.subarray(8 * i, 8 * i + bytes)).equals(Buffer.from(source))).toBe(true);
    }
    expect(chooser.chosen.get("large@0")).toBe(method);
  });

  it("copies small ones with set, and refuses a copy past the target's end as set does", () => {
    const clock = scriptedClock({ memcpy: 1, set: 2 });
    const chooser = new CopyChooser(clock, clock);
    checkCopy(chooser, 17, 5, 1);
    expect(chooser.chosen.size).toBe(0);
    const target = sharedBytes(1 << 20);
    expect(() => chooser.copy(target.subarray(0, 20_000), 4000, new Uint8Array(16_384))).toThrow(RangeError);
    expect(() => chooser.copy(target, -1, new Uint8Array(16_384))).toThrow(RangeError);
  });
});
