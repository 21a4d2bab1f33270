// The storage contract on the browser build's memory://, registered the same way in the page
// (which runs the cases) and in Node (which only needs their names, to report each on its own).
import { type ContractTestApi, defineStorageContract } from "@cairn/core/testing";
import { openStorage } from "@cairn/core/storage";
import "../../src/index.browser.js";

let fresh = 0;

export function registerContracts(api: ContractTestApi): void {
  defineStorageContract(api, "memory:// in a page", { open: () => openStorage(`memory://contract/${fresh++}`) });
}
