// core's storage contract suite, every case run in headless Chromium on opfs:// and idb://.
import { fileURLToPath } from "node:url";
import { type TestPage, type TestPageServer, chromiumSuite, openTestPage, serveTestPage } from "@cairn/browser-testing";
import { SuiteRunner } from "@cairn/browser-testing/page";
import { afterAll, describe, expect, it } from "vitest";
import { registerContracts } from "./pages/contract-cases.js";

const PAGE = fileURLToPath(new URL("./pages/contract-page.ts", import.meta.url));

const cases = new SuiteRunner();
registerContracts(cases.api);

describe("the storage contract in Chromium", () => {
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

  it("registers the same cases in the page as here", { timeout: 120_000 }, async ({ skip }) => {
    expect(await (await contractPage(skip)).call("names")).toEqual(cases.names());
  });

  for (const name of cases.names()) {
    it(name, { timeout: 150_000 }, async ({ skip }) => {
      await (await contractPage(skip)).call("run", name);
    });
  }
});
