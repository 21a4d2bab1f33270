import { registerStorage } from "@cairn/core";
import { openFileStorage, openMemoryStorage } from "./local-storage.js";

registerStorage("file", openFileStorage);
registerStorage("memory", openMemoryStorage);

export { FsStorageAdapter, type FsStorageAdapterOptions } from "./fs-storage-adapter.js";
export type { FsPromisesLike, FileHandleLike } from "./fs-like.js";
export {
  openFileStorage,
  openFileStorageForWorker,
  openMemoryStorage,
  memoryVolume,
  resetMemoryStorage,
} from "./local-storage.js";
