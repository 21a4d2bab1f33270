import { registerStorage } from "@cairn/core";
import { openS3Storage } from "./open-s3-storage.js";

registerStorage("s3", openS3Storage);

export { S3StorageAdapter, type S3Location } from "./s3-storage-adapter.js";
export { MIN_PART_SIZE, type S3StorageAdapterOptions } from "./s3-storage-options.js";
export { openS3Storage, type S3StorageOptions } from "./open-s3-storage.js";
export { isTransientS3Error } from "./s3-error.js";
