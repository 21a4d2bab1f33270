// The browser demo (issue 37) driven as a user would: it trains in the page, checkpoints to OPFS,
// resumes after a reload with the weights of a run that never stopped, exports the newest step as
// one safetensors file and loads a checkpoint published over HTTP.
import { readFile } from "node:fs/promises";
import { type ChromiumSession, type Page, chromiumSuite } from "@cairn/browser-testing";
import { crc32c } from "@cairn/core/format";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DemoServer, serveDemo } from "./serve-demo.js";

const STEPS = 60;
const EVERY = 5;

describe("the browser demo", () => {
  const chromium = chromiumSuite({ gpu: "swiftshader" });
  let demo: DemoServer | undefined;
  beforeAll(async () => {
    demo = await serveDemo();
  }, 120_000);
  afterAll(() => demo?.close());

  async function open(session: ChromiumSession, run: string): Promise<Page> {
    const page = await session.newPage();
    await page.goto(`${demo!.url}?run=${run}&steps=${STEPS}&every=${EVERY}`);
    return page;
  }

  const text = async (page: Page, id: string): Promise<string> => (await page.locator(`#${id}`).textContent()) ?? "";

  /** Waits until `#id` has text (or the demo reports a failure) and returns it. */
  async function waitForText(page: Page, id: string): Promise<string> {
    await page.waitForFunction(
      (target: string) =>
        document.getElementById(target)!.textContent !== "" ||
        document.getElementById("status")!.textContent!.startsWith("failed"),
      id,
      { timeout: 120_000, polling: 100 },
    );
    expect(await text(page, "status")).not.toMatch(/^failed/);
    return text(page, id);
  }

  let whole: { page: Page; checksum: string } | undefined;
  /** A run that is never interrupted, on its own page (kept open for the export test). */
  async function uninterrupted(session: ChromiumSession): Promise<{ page: Page; checksum: string }> {
    if (whole) return whole;
    const page = await open(session, "whole");
    const checksum = await waitForText(page, "checksum");
    expect(await text(page, "backend")).toBe("webgl");
    expect(await text(page, "resumed")).toBe("");
    return (whole = { page, checksum });
  }

  it(
    "resumes after a reload from the newest step in OPFS and ends with the uninterrupted run's checksum",
    { timeout: 300_000 },
    async ({ skip }) => {
      const session = await chromium.session(skip);
      const { checksum } = await uninterrupted(session);
      expect(checksum).toMatch(/^[0-9a-f]{8}$/);
      const page = await open(session, "cut");
      await page.waitForFunction(
        () => document.getElementById("log")!.textContent!.includes("checkpointed step 15\n"),
        undefined,
        {
          timeout: 120_000,
          polling: 20,
        },
      );
      await page.reload();
      const resumed = /^resumed from step (\d+)$/.exec(await waitForText(page, "resumed"));
      const from = Number(resumed?.[1]);
      // The newest step committed before the reload: 15 or later, and not the end (the reload cut the run).
      expect(from % EVERY, `resumed from ${from}`).toBe(0);
      expect(from).toBeGreaterThanOrEqual(15);
      expect(from).toBeLessThan(STEPS);
      expect(await waitForText(page, "checksum")).toBe(checksum);
      await page.close();
    },
  );

  it(
    "exports the newest step as one safetensors file holding the final weights",
    { timeout: 300_000 },
    async ({ skip }) => {
      const session = await chromium.session(skip);
      const { page, checksum } = await uninterrupted(session);
      const [download] = await Promise.all([page.waitForEvent("download"), page.click("#export")]);
      expect(download.suggestedFilename()).toBe(`cairn-demo-whole-step-${STEPS}.safetensors`);
      const file = new Uint8Array(await readFile((await download.path())!));
      const headerLength = Number(new DataView(file.buffer, file.byteOffset).getBigUint64(0, true));
      const header = JSON.parse(new TextDecoder().decode(file.subarray(8, 8 + headerLength))) as Record<
        string,
        { dtype: string; shape: number[]; data_offsets: [number, number] }
      >;
      const data = file.subarray(8 + headerLength);
      expect(Object.keys(header)).toEqual(expect.arrayContaining(["__metadata__", "model.layers.0.kernel"]));
      // The model's weights in the order tfjs's getWeights gives them: their CRC32C is the demo's final checksum.
      let crc = 0;
      for (const name of [
        "model.layers.0.kernel",
        "model.layers.0.bias",
        "model.layers.1.kernel",
        "model.layers.1.bias",
      ]) {
        const [start, end] = header[name]!.data_offsets;
        expect(header[name]!.dtype).toBe("F32");
        crc = crc32c(data.subarray(start, end), crc);
      }
      expect(crc.toString(16).padStart(8, "0")).toBe(checksum);
      await page.close();
    },
  );

  it("loads a checkpoint published over HTTP into the page, bit-exact", { timeout: 300_000 }, async ({ skip }) => {
    const session = await chromium.session(skip);
    const page = await session.newPage();
    // Steps=1: the page's own run ends at once and stays out of the way.
    await page.goto(`${demo!.url}?run=loader&steps=1&every=1`);
    await waitForText(page, "checksum");
    expect(await page.inputValue("#url")).toBe(`${demo!.url}sample-run`);
    await page.click("#load");
    expect(await waitForText(page, "loaded")).toBe(
      `loaded step ${demo!.sample.step} from ${demo!.url}sample-run: weights checksum ${demo!.sample.checksum}`,
    );
    await page.close();
  });
});
