// @cairn/storage-browser: registers opfs:// and idb:// when imported.
import { registerStorage } from "@cairn/core";
import { redactUrl } from "@cairn/core/storage";
import { IdbStorageAdapter } from "./idb-storage-adapter.js";
import { locationNames } from "./location.js";
import { OpfsStorageAdapter } from "./opfs-storage-adapter.js";

/** Opens `opfs://name/path`: directories of the origin's private file system. */
export function openOpfsStorage(url: URL): OpfsStorageAdapter {
  return new OpfsStorageAdapter(locationNames("opfs", url), redactUrl(url));
}

/** Opens `idb://db/path`: objects in the IndexedDB database `db` under the prefix `path/`. */
export function openIdbStorage(url: URL): IdbStorageAdapter {
  return new IdbStorageAdapter(locationNames("idb", url), redactUrl(url));
}

registerStorage("opfs", openOpfsStorage);
registerStorage("idb", openIdbStorage);

export { OpfsStorageAdapter } from "./opfs-storage-adapter.js";
export { IDB_CHUNK_BYTES, IdbStorageAdapter } from "./idb-storage-adapter.js";
