import { SuiteRunner, exposeToTests } from "@cairn/browser-testing/page";
import { openStorage } from "@cairn/core/storage";
import { resetMemoryStorage } from "../../src/index.browser.js";
import { registerContracts } from "./memory-contract-cases.js";

const runner = new SuiteRunner();
registerContracts(runner.api);

/** What opening `url` does in the page: the adapter's class, or the error's code and message. */
async function open(url: string): Promise<string> {
  try {
    const storage = await openStorage(url);
    await storage.close();
    return storage.constructor.name;
  } catch (error) {
    return `${(error as { code?: string }).code}: ${(error as Error).message}`;
  }
}

exposeToTests({
  names: () => runner.names(),
  run: (name: string) => runner.run(name),
  open,
  reset: () => resetMemoryStorage(),
});
