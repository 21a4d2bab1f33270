import { S3Client, type S3ClientConfig } from "@aws-sdk/client-s3";
import { CheckpointError, type StorageAdapter, type StorageOptions } from "@cairn/core";
import { DEFAULT_PROGRESS_TIMEOUT_MS, checkRelativePath } from "@cairn/core/storage";
import { S3StorageAdapter } from "./s3-storage-adapter.js";
import type { S3StorageAdapterOptions } from "./s3-storage-options.js";

/**
 * What `openStorage("s3://bucket/prefix", { s3: {...} })` accepts. Either `client` (used as
 * is, never destroyed by the adapter) or the settings for a client the adapter builds and
 * owns. Credentials come from the SDK's default chain (environment, shared config, SSO, IMDS,
 * …) unless given; they are never logged.
 */
export interface S3StorageOptions extends S3StorageAdapterOptions {
  /**
   * An existing client. Its own retry settings stay as they are and run inside each of the
   * adapter's attempts: build it with `maxAttempts: 1` so the two do not multiply (see README).
   */
  readonly client?: S3Client;
  /** The SDK's region chain (AWS_REGION, shared config) when absent. */
  readonly region?: string;
  /** For S3-compatible stores: "http://127.0.0.1:9000" (MinIO), "https://<account>.r2.cloudflarestorage.com" (R2). */
  readonly endpoint?: string;
  /** Bucket in the path instead of the host name; most S3-compatible stores need it. */
  readonly forcePathStyle?: boolean;
  readonly credentials?: S3ClientConfig["credentials"];
  /**
   * When the SDK adds its own checksums to requests (SDK default "WHEN_SUPPORTED"). Some
   * S3-compatible servers mishandle them; "WHEN_REQUIRED" limits them to operations that need one.
   */
  readonly requestChecksumCalculation?: S3ClientConfig["requestChecksumCalculation"];
  /** Connecting for longer than this fails as transient and is retried (default 10 s). */
  readonly connectionTimeoutMs?: number;
}

/**
 * The `s3://` factory the package registers: `s3://bucket/some/prefix` roots the adapter at
 * `some/prefix/` in `bucket`, configured by `storageOptions.s3`. Throws `invalid_argument` for a
 * URL without a bucket or with credentials in it, or for bad options.
 */
export function openS3Storage(url: URL, storageOptions: StorageOptions = {}): StorageAdapter {
  const options = (storageOptions.s3 ?? {}) as S3StorageOptions;
  if (typeof options !== "object" || options === null) {
    throw new CheckpointError("invalid_argument", "[s3] storageOptions.s3 must be an object of S3StorageOptions");
  }
  const bucket = decodeURIComponent(url.host);
  if (bucket === "")
    throw new CheckpointError(
      "invalid_argument",
      `[s3] ${url.protocol}//${url.pathname} names no bucket; write s3://bucket/prefix`,
    );
  if (url.username !== "" || url.password !== "") {
    throw new CheckpointError(
      "invalid_argument",
      `[s3] s3://${bucket}${url.pathname}: credentials do not belong in the URL; use the SDK's credential chain or storageOptions.s3.credentials`,
    );
  }
  const path = decodeURIComponent(url.pathname).replace(/^\/+|\/+$/g, "");
  const prefix = path === "" ? "" : `${checkRelativePath("s3", path)}/`;
  if (options.client) return new S3StorageAdapter(options.client, { bucket, prefix }, options);
  const progress = options.progressTimeoutMs ?? DEFAULT_PROGRESS_TIMEOUT_MS;
  const client = new S3Client({
    ...(options.region ? { region: options.region } : {}),
    ...(options.endpoint ? { endpoint: options.endpoint } : {}),
    ...(options.forcePathStyle !== undefined ? { forcePathStyle: options.forcePathStyle } : {}),
    ...(options.credentials ? { credentials: options.credentials } : {}),
    ...(options.requestChecksumCalculation ? { requestChecksumCalculation: options.requestChecksumCalculation } : {}),
    // The adapter retries every request through core's policy; SDK retries on top would multiply.
    maxAttempts: 1,
    requestHandler: {
      // The socket's idle timeout is the progress deadline of uploads, whose bytes only it sees.
      socketTimeout: Number.isFinite(progress) ? progress : 0,
      connectionTimeout: options.connectionTimeoutMs ?? 10_000,
    },
  });
  return new S3StorageAdapter(client, { bucket, prefix }, options, () => client.destroy());
}
