import { registerStorage } from "@cairn/core";
import { openGcsStorage } from "./open-gcs-storage.js";

registerStorage("gs", openGcsStorage);

export { GcsStorageAdapter, type GcsStorageAdapterOptions } from "./gcs-storage-adapter.js";
export { openGcsStorage, type GcsStorageOptions } from "./open-gcs-storage.js";
