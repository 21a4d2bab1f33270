// @cairn/storage-http: registers https:// and http:// (read-only) when imported.
import { registerStorage } from "@cairn/core";
import { type HttpStorageOptions, HttpStorageAdapter } from "./http-storage-adapter.js";

/** Opens a published root; options under `{ https: {...} }` (or `http`) in the storage options. */
export function openHttpStorage(url: URL, options: Readonly<Record<string, unknown>> = {}): HttpStorageAdapter {
  const protocol = url.protocol.replace(/:$/, "");
  return new HttpStorageAdapter(url, (options[protocol] ?? {}) as HttpStorageOptions);
}

registerStorage("https", openHttpStorage);
registerStorage("http", openHttpStorage);

export { type HttpStorageOptions, HttpStorageAdapter } from "./http-storage-adapter.js";
export { HTTP_INDEX_FILE, type HttpIndex, encodeHttpIndex, parseHttpIndex } from "./http-index.js";
export { type PublishResult, publishStep } from "./publish.js";
