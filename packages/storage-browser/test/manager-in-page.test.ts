// CheckpointManager in a page on opfs:// and idb://: save → reload → restore bit-exact; a save cut
// by closing the tab is never listed; a flipped byte in OPFS is caught on load.
import { fileURLToPath } from "node:url";
import { type TestPageServer, chromiumSuite, openTestPage, serveTestPage } from "@cairn/browser-testing";
import { afterAll, describe, expect, it } from "vitest";

const PAGE = fileURLToPath(new URL("./pages/manager-page.ts", import.meta.url));

describe("CheckpointManager in Chromium", () => {
  const chromium = chromiumSuite();
  let served: TestPageServer | undefined;
  const serve = async () => (served ??= await serveTestPage({ entry: PAGE }));
  afterAll(() => served?.close());

  for (const root of ["opfs://manager-reload", "idb://manager/reload"]) {
    it(
      `saves with saveAsync and retention, and after a reload restores the newest step bit-exact (${root})`,
      { timeout: 180_000 },
      async ({ skip }) => {
        const session = await chromium.session(skip);
        const page = await openTestPage(session, (await serve()).url);
        const saved = await page.call<{ steps: number[]; checksum: string }>("saveSteps", root, 12, 3, 2);
        expect(saved.steps).toEqual([9, 12]);
        await page.reload();
        expect(await page.call("restoreLatest", root)).toEqual({ step: 12, checksum: saved.checksum });
        await page.close();
      },
    );
  }

  it("never lists a step whose save was cut by closing the tab", { timeout: 180_000 }, async ({ skip }) => {
    const session = await chromium.session(skip);
    const first = await openTestPage(session, (await serve()).url);
    const saved = await first.call<{ steps: number[]; checksum: string }>("saveSteps", "opfs://cut", 1, 1, 5);
    expect(saved.steps).toEqual([1]);
    await first.call("startLargeSave", "opfs://cut", 2);
    // Close once the save has begun writing step 2 (its temp files exist), before it can commit.
    await first.page.waitForFunction(
      async () => {
        try {
          let dir = await navigator.storage.getDirectory();
          dir = await (await dir.getDirectoryHandle("cut")).getDirectoryHandle("2");
          for await (const _ of (dir as unknown as { keys(): AsyncIterable<string> }).keys()) return true;
        } catch {
          return false;
        }
        return false;
      },
      undefined,
      { polling: 5, timeout: 60_000 },
    );
    await first.page.close({ runBeforeUnload: false });
    const second = await openTestPage(session, (await serve()).url);
    const left = await second.call<string[]>("rawFiles", "cut", 2);
    expect(
      left.some((name) => name.startsWith(".cairn-tmp-")),
      `files of step 2: ${left.join(", ")}`,
    ).toBe(true);
    expect(left).not.toContain("metadata.json");
    expect(await second.call("steps", "opfs://cut")).toEqual([1]);
    expect(await second.call("restoreLatest", "opfs://cut")).toEqual({ step: 1, checksum: saved.checksum });
    await second.close();
  });

  it("reports a flipped byte in an OPFS data file as corrupt on restore", { timeout: 180_000 }, async ({ skip }) => {
    const session = await chromium.session(skip);
    const page = await openTestPage(session, (await serve()).url);
    await page.call("saveSteps", "opfs://flipped", 1, 1, 5);
    expect(await page.call("restoreError", "opfs://flipped", 1)).toBe("restored");
    await page.call("flipByte", "flipped", 1);
    expect(await page.call("restoreError", "opfs://flipped", 1)).toMatch(/^corrupt: checksum mismatch in data-r0-/);
    await page.close();
  });
});
