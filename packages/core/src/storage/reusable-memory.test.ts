import { describe, expect, it } from "vitest";
import { isPageAligned } from "./page-aligned.js";
import { giveBackReusableMemory, takeReusableMemory } from "./reusable-memory.js";

describe("reusable memory", () => {
  it("hands back what was given back, page-aligned only where asked for, new plain memory unshared", () => {
    const plain = takeReusableMemory(3 << 20);
    // A load's staging: ordinary memory (a browser page without cross-origin isolation has no shared memory).
    expect(plain.buffer).toBeInstanceOf(ArrayBuffer);
    expect(plain.byteLength).toBe(3 << 20);
    giveBackReusableMemory(plain);
    // Page-aligned asked for: the plain memory in the pool does not do.
    const aligned = takeReusableMemory(2 << 20, true);
    expect(isPageAligned(aligned.buffer)).toBe(true);
    expect(aligned.buffer).not.toBe(plain.buffer);
    // Plain asked for: the pooled plain memory, reused rather than allocated again.
    expect(takeReusableMemory(1 << 20).buffer).toBe(plain.buffer);
    giveBackReusableMemory(aligned);
    // Any memory does for a plain request, page-aligned included.
    expect(takeReusableMemory(2 << 20).buffer).toBe(aligned.buffer);
  });
});
