// OPFS reads in Web Workers, in Chromium: the block checksums they compute for a load are core's,
// and a flipped byte in a tensor hashed there is still caught.
import { fileURLToPath } from "node:url";
import { type TestPageServer, chromiumSuite, openTestPage, serveTestPage } from "@cairn/browser-testing";
import { afterAll, describe, expect, it } from "vitest";

const PAGE = fileURLToPath(new URL("./pages/read-workers-page.ts", import.meta.url));

describe("OPFS read workers in Chromium", () => {
  const chromium = chromiumSuite();
  let served: TestPageServer | undefined;
  afterAll(() => served?.close());

  it(
    "hash a read's blocks as core does, the last one short, and land the bytes in place",
    { timeout: 180_000 },
    async ({ skip }) => {
      const session = await chromium.session(skip);
      const page = await openTestPage(session, (served ??= await serveTestPage({ entry: PAGE })).url);
      for (const [offset, length] of [
        [0, 3 * 65536 + 5],
        [65536, 2 * 65536 + 3],
        [7, 100],
      ] as const) {
        const { sums, expected, same } = await page.call<{ sums: number[] | null; expected: number[]; same: boolean }>(
          "hashedRead",
          offset,
          length,
          65536,
        );
        expect(same).toBe(true);
        expect(sums).toEqual(expected);
      }
      await page.close();
    },
  );

  it(
    "leave a flipped byte in a tensor read straight into place to be reported as corrupt",
    { timeout: 180_000 },
    async ({ skip }) => {
      const session = await chromium.session(skip);
      const page = await openTestPage(session, (served ??= await serveTestPage({ entry: PAGE })).url);
      const [before, after] = await page.call<string[]>("flippedLoad");
      expect(before).toBe("loaded");
      expect(after).toMatch(/^corrupt: checksum mismatch in data-r0-.* for w \(block /);
      await page.close();
    },
  );

  it(
    "read large ranges through read-only sync access handles, several of one file at once, hashed in WebAssembly as core does",
    { timeout: 180_000 },
    async ({ skip }) => {
      const session = await chromium.session(skip);
      const page = await openTestPage(session, (served ??= await serveTestPage({ entry: PAGE })).url);
      // Reusable memory that is shared (a save's staging; it cannot be transferred) is not lent: the reads still come back right.
      expect(await page.call("largeReads", 4, true)).toEqual({
        same: true,
        sumsRight: true,
        locked: 4,
        sliced: 0,
        hashedInWasm: 4,
      });
      const result = await page.call<{ same: boolean; sumsRight: boolean; locked: number; sliced: number }>(
        "largeReads",
        8,
      );
      expect(result).toEqual({ same: true, sumsRight: true, locked: 8, sliced: 0, hashedInWasm: 8 });
      await page.close();
    },
  );

  it("never return bytes of a file replaced after the snapshot was taken", { timeout: 180_000 }, async ({ skip }) => {
    const session = await chromium.session(skip);
    const page = await openTestPage(session, (served ??= await serveTestPage({ entry: PAGE })).url);
    expect(await page.call<string>("replacedUnderReader")).toMatch(/^(old|error: .*)$/);
    await page.close();
  });

  it("let a delete through while reads of the file are in flight", { timeout: 180_000 }, async ({ skip }) => {
    const session = await chromium.session(skip);
    const page = await openTestPage(session, (served ??= await serveTestPage({ entry: PAGE })).url);
    const rounds = 6;
    expect(await page.call<{ deleted: string[]; gone: boolean[] }>("deleteWhileReading", rounds)).toEqual({
      deleted: Array(rounds).fill("ok"),
      gone: Array(rounds).fill(true),
    });
    await page.close();
  });
});
