import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { chromiumSuite } from "./chromium-suite.js";
import { launchChromium, requireChromium } from "./chromium.js";
import { type TestPageServer, openTestPage, serveTestPage } from "./test-page.js";

const PROBE = fileURLToPath(new URL("./fixtures/probe-page.ts", import.meta.url));

describe("a test page in headless Chromium", () => {
  const chromium = chromiumSuite();
  let served: TestPageServer | undefined;
  const serve = async () => (served ??= await serveTestPage({ entry: PROBE, files: { "/data.txt": "0123456789" } }));
  afterAll(() => served?.close());

  it("calls the page's functions, and reports what they throw", { timeout: 120_000 }, async ({ skip }) => {
    const session = await chromium.session(skip);
    const page = await openTestPage(session, (await serve()).url);
    expect(await page.call("add", 2, 3)).toBe(5);
    expect(await page.call("secure")).toBe(true);
    await expect(page.call("fail", "boom")).rejects.toThrow(/boom/);
    await expect(page.call("nothing")).rejects.toThrow(/exposes no function nothing/);
    await page.close();
  });

  it("keeps OPFS across a reload and a new tab of the same session", { timeout: 120_000 }, async ({ skip }) => {
    const session = await chromium.session(skip);
    const first = await openTestPage(session, (await serve()).url);
    await first.call("writeOpfs", "kept.txt", "hello");
    await first.reload();
    expect(await first.call("readOpfs", "kept.txt")).toBe("hello");
    await first.close();
    const second = await openTestPage(session, (await serve()).url);
    expect(await second.call("readOpfs", "kept.txt")).toBe("hello");
    expect(await second.call("readOpfs", "missing.txt")).toBeNull();
    await second.close();
  });

  it("serves byte ranges", { timeout: 120_000 }, async ({ skip }) => {
    const session = await chromium.session(skip);
    const page = await openTestPage(session, (await serve()).url);
    expect(await page.call("fetchRange", "/data.txt", "bytes=2-4")).toEqual({ status: 206, text: "234" });
    expect(await page.call("fetchRange", "/data.txt", "bytes=-3")).toEqual({ status: 206, text: "789" });
    expect(await page.call("fetchRange", "/data.txt", "bytes=20-")).toMatchObject({ status: 416 });
    await page.close();
  });
});

describe("SwiftShader", () => {
  it(
    "gives a page WebGL2 with float colour buffers (what tfjs's webgl backend needs)",
    { timeout: 120_000 },
    async ({ skip }) => {
      const executablePath = requireChromium(skip);
      const session = await launchChromium({ executablePath, gpu: "swiftshader" });
      const served = await serveTestPage({ entry: PROBE });
      try {
        const page = await openTestPage(session, served.url);
        const gl = await page.call<{ version: string; floatColorBuffer: boolean } | null>("webgl");
        expect(gl?.version).toMatch(/WebGL 2/);
        expect(gl?.floatColorBuffer).toBe(true);
      } finally {
        await session.close();
        await served.close();
      }
    },
  );
});
