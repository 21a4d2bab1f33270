import { CheckpointError, type StorageAdapter, type StorageOptions } from "@cairn/core";
import { redactUrl } from "@cairn/core/storage";
import { Storage, type StorageOptions as SdkStorageOptions } from "@google-cloud/storage";
import { GcsStorageAdapter, type GcsStorageAdapterOptions } from "./gcs-storage-adapter.js";

/**
 * What `openStorage("gs://bucket/prefix", { gs: {...} })` accepts. Either an existing `Storage`
 * client, or what to make one from; without either, the SDK's defaults apply (Application
 * Default Credentials, and `STORAGE_EMULATOR_HOST` if set when the URL is opened).
 */
export interface GcsStorageOptions extends GcsStorageAdapterOptions {
  /** A client to use as is. Turn its retries off (`retryOptions: { autoRetry: false }`) to keep Cairn's retry policy in charge. */
  readonly storage?: Storage;
  readonly projectId?: string;
  /** Path of a service-account key file. */
  readonly keyFilename?: string;
  /** A service-account key, inline. Never logged or put in a message. */
  readonly credentials?: SdkStorageOptions["credentials"];
  /** Another endpoint than storage.googleapis.com (an emulator: "http://127.0.0.1:9199"). */
  readonly apiEndpoint?: string;
}

/**
 * The `gs://` factory the package registers: the URL's host is the bucket and its path the
 * object prefix of the adapter's root. Throws `invalid_argument` for a URL without a bucket.
 */
export function openGcsStorage(url: URL, storageOptions: StorageOptions = {}): StorageAdapter {
  const bucket = decodeURIComponent(url.hostname);
  if (!bucket) {
    throw new CheckpointError(
      "invalid_argument",
      `[gs] ${redactUrl(url)} names no bucket; use gs://<bucket>/<prefix>`,
      { context: { protocol: "gs" } },
    );
  }
  const options = (storageOptions["gs"] ?? {}) as GcsStorageOptions;
  const { storage, projectId, keyFilename, credentials, apiEndpoint, ...adapterOptions } = options;
  const client =
    storage ??
    new Storage({
      ...(projectId !== undefined ? { projectId } : {}),
      ...(keyFilename !== undefined ? { keyFilename } : {}),
      ...(credentials !== undefined ? { credentials } : {}),
      ...(apiEndpoint !== undefined ? { apiEndpoint } : {}),
      // The adapter retries through core's policy; SDK retries on top would multiply the attempts.
      retryOptions: { autoRetry: false },
    });
  return new GcsStorageAdapter(client, bucket, decodeURIComponent(url.pathname), adapterOptions);
}
