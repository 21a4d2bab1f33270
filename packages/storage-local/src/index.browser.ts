// @cairn/storage-local in a browser: memory:// as a map of the page (memfs needs Node's modules);
// file:// does not exist there, and opening it says what to use instead, rather than "install me".
import { CheckpointError, registerStorage } from "@cairn/core";
import { redactUrl } from "@cairn/core/storage";
import { memoryNames } from "./memory-location.js";
import { MemoryStorageAdapter, resetMemoryObjects } from "./memory-storage-adapter.js";

/** Opens `memory://name/path`: objects in this page's memory, gone when the page is. */
export function openMemoryStorage(url: URL): MemoryStorageAdapter {
  return new MemoryStorageAdapter(memoryNames(url), redactUrl(url));
}

/** Empties every `memory://` location of the page (between tests). */
export function resetMemoryStorage(): void {
  resetMemoryObjects();
}

registerStorage("file", () => {
  throw new CheckpointError(
    "unsupported_protocol",
    '[file] file:// storage needs Node; in a browser use opfs:// or idb:// (import "@cairn/storage-browser"), memory:// or https://',
    { context: { protocol: "file" } },
  );
});
registerStorage("memory", openMemoryStorage);

export { MemoryStorageAdapter } from "./memory-storage-adapter.js";
