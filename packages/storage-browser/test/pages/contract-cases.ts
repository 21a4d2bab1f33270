// The storage contract on opfs:// and idb://, registered the same way in the page (which runs the
// cases) and in Node (which only needs their names, to report each case on its own).
import { type ContractTestApi, defineStorageContract } from "@cairn/core/testing";
import { openStorage } from "@cairn/core/storage";
import "../../src/index.js";

let fresh = 0;

/** A root no earlier case used: the page keeps OPFS and IndexedDB across cases. */
function freshRoot(): string {
  return `${Date.now().toString(36)}-${fresh++}`;
}

export function registerContracts(api: ContractTestApi): void {
  // 230 objects: OPFS lists a directory in one go, there is no page to go past.
  defineStorageContract(api, "opfs://", {
    open: () => openStorage(`opfs://contract/${freshRoot()}`),
    timeoutMs: 120_000,
    listCount: 230,
  });
  // 600 objects: past the adapter's listing page (500); each commit is a durable IndexedDB transaction.
  defineStorageContract(api, "idb://", {
    open: () => openStorage(`idb://contract/${freshRoot()}`),
    timeoutMs: 120_000,
    listCount: 600,
  });
}
