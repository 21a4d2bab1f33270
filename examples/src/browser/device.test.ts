// Issue 38: device tensors for real. A small model trains on tfjs's webgl backend in headless
// Chromium (SwiftShader's WebGL2: every tensor in a GPU texture) and is checkpointed with
// saveAsync while training goes on mutating the same variables on the device.
import { fileURLToPath } from "node:url";
import { type TestPage, type TestPageServer, chromiumSuite, openTestPage, serveTestPage } from "@cairn/browser-testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const PAGE = fileURLToPath(new URL("./device-page.ts", import.meta.url));
const STEPS = 12;
const EVERY = 4;
/** Saves per leak check: memory is compared after every one, and the retention (2 kept) deletes from the third on. */
const SAVES = 40;

type Memory = { numTensors: number; numBytes: number; numBytesInGPU: number; numBytesInGPUAllocated: number };

describe("saveAsync on tfjs's webgl backend in Chromium", () => {
  const chromium = chromiumSuite({ gpu: "swiftshader" });
  let served: TestPageServer | undefined;
  beforeAll(async () => {
    served = await serveTestPage({ entry: PAGE });
  });
  afterAll(() => served?.close());

  /** A tab on the page with the webgl backend in use, asserted: a fall-back to cpu fails here. */
  async function webglPage(skip: (condition: boolean, note?: string) => void): Promise<TestPage> {
    const page = await openTestPage(await chromium.session(skip), served!.url);
    await expectWebgl(page);
    return page;
  }

  async function expectWebgl(page: TestPage): Promise<void> {
    const used = await page.call<{ backend: string; renderer: string | null; float32: boolean }>("backend", "webgl");
    expect(used.backend).toBe("webgl");
    expect(used.renderer).toMatch(/SwiftShader/i);
    expect(used.float32).toBe(true);
  }

  let expected: Record<number, string> | undefined;
  /** The state's checksum every EVERY steps of a run that saves nothing. */
  async function uninterrupted(page: TestPage): Promise<Record<number, string>> {
    expected ??= await page.call<Record<number, string>>("uninterrupted", { steps: STEPS, every: EVERY });
    return expected;
  }

  it(
    "restores every step bit-exact as it was when saveAsync returned, though training mutated it before the write",
    { timeout: 300_000 },
    async ({ skip }) => {
      const page = await webglPage(skip);
      const want = await uninterrupted(page);
      expect(Object.keys(want).map(Number)).toEqual([4, 8, 12]);
      for (const [root, staging] of [
        ["memory://device/copy", "copy"],
        ["memory://device/reference", "reference"],
        ["opfs://device-copy", "copy"],
      ] as const) {
        const { inFlight } = await page.call<{ inFlight: Record<number, number> }>("trainSaving", {
          root,
          steps: STEPS,
          every: EVERY,
          staging,
        });
        // Training went on at least two steps before each save's data was written (the last: to its end).
        expect(Object.keys(inFlight).map(Number), root).toEqual([4, 8, 12]);
        expect(Math.min(inFlight[4]!, inFlight[8]!), root).toBeGreaterThanOrEqual(2);
        for (const step of [4, 8, 12])
          expect(await page.call("restored", root, step), `${root} step ${step}`).toEqual({
            step,
            checksum: want[step],
          });
      }
      await page.close();
    },
  );

  it(
    "resumes after a reload from the newest step in OPFS and ends bit-exact with an uninterrupted run",
    { timeout: 300_000 },
    async ({ skip }) => {
      const page = await webglPage(skip);
      const want = await uninterrupted(page);
      const root = "opfs://device-reload";
      await page.call("trainSaving", { root, steps: 8, every: EVERY, staging: "reference" });
      await page.reload();
      await expectWebgl(page);
      expect(await page.call("restored", root, 4)).toEqual({ step: 4, checksum: want[4] });
      expect(await page.call("resume", { root, steps: STEPS, every: EVERY })).toEqual({
        resumedFrom: 8,
        checksum: want[12],
      });
      await page.close();
    },
  );

  for (const staging of ["copy", "reference"] as const) {
    it(`leaks no device memory over ${SAVES} saves with ${staging} staging`, { timeout: 300_000 }, async ({ skip }) => {
      const page = await webglPage(skip);
      const result = await page.call<{ warm: Memory; end: Memory; notBack: unknown[]; heldTensors: number }>(
        "deviceMemory",
        { root: `memory://device-memory/${staging}`, saves: SAVES, staging },
      );
      // Back to the level of before the save once staged (reference staging: once written), every time.
      expect(result.notBack).toEqual([]);
      // Copy staging holds nothing of the device; reference staging holds a clone of each tensor until written.
      if (staging === "copy") expect(result.heldTensors).toBe(0);
      else expect(result.heldTensors).toBeGreaterThan(0);
      expect(result.end.numTensors).toBe(result.warm.numTensors);
      expect(result.end.numBytesInGPU).toBe(result.warm.numBytesInGPU);
      // Textures tfjs keeps for reuse do not pile up either.
      expect(result.end.numBytesInGPUAllocated).toBeLessThanOrEqual(result.warm.numBytesInGPUAllocated);
      await page.close();
    });
  }
});
