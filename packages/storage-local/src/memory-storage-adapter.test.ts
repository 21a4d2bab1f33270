// The page's memory:// adapter (a map, no memfs) passes the storage contract in Node too; the same
// cases run in Chromium in test/memory-in-chromium.test.ts.
import { storageContractSuite } from "@cairn/core/testing";
import { MemoryStorageAdapter } from "./memory-storage-adapter.js";

let fresh = 0;

storageContractSuite("memory:// in a page's map (run in Node)", {
  open: () => {
    const names = ["contract", String(fresh++)];
    return Promise.resolve(new MemoryStorageAdapter(names, `memory://${names.join("/")}`));
  },
});
