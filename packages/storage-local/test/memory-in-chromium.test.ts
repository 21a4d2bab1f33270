// memory:// in a page (the browser build's map, not memfs): core's storage contract, every case in
// headless Chromium, and file:// refused there with what to use instead.
import { fileURLToPath } from "node:url";
import { type TestPage, type TestPageServer, chromiumSuite, openTestPage, serveTestPage } from "@cairn/browser-testing";
import { SuiteRunner } from "@cairn/browser-testing/page";
import { afterAll, describe, expect, it } from "vitest";
import { registerContracts } from "./pages/memory-contract-cases.js";

const PAGE = fileURLToPath(new URL("./pages/memory-contract-page.ts", import.meta.url));

const cases = new SuiteRunner();
registerContracts(cases.api);

describe("memory:// in Chromium", () => {
  const chromium = chromiumSuite();
  let served: TestPageServer | undefined;
  let page: TestPage | undefined;
  afterAll(() => served?.close());

  async function contractPage(skip: (condition: boolean, note?: string) => void): Promise<TestPage> {
    const session = await chromium.session(skip);
    served ??= await serveTestPage({ entry: PAGE });
    page ??= await openTestPage(session, served.url);
    return page;
  }

  it(
    "opens memory:// as the page's map, and refuses file:// naming what to use",
    { timeout: 120_000 },
    async ({ skip }) => {
      const page = await contractPage(skip);
      expect(await page.call("names")).toEqual(cases.names());
      expect(await page.call("open", "memory://run/a")).toBe("MemoryStorageAdapter");
      expect(await page.call("open", "memory://run/a%2Fb")).toMatch(/^invalid_argument: .*not a plain name/);
      expect(await page.call("open", "file:///tmp/run")).toMatch(/^unsupported_protocol: .*opfs:\/\/.*memory:\/\//);
    },
  );

  for (const name of cases.names()) {
    it(name, { timeout: 150_000 }, async ({ skip }) => {
      await (await contractPage(skip)).call("run", name);
    });
  }
});
