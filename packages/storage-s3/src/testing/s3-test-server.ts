import { randomBytes } from "node:crypto";
import { HeadObjectCommand, S3Client } from "@aws-sdk/client-s3";
import type { StorageOptions } from "@cairn/core";
import { FaultProxy, type PreconditionEnforcer } from "@cairn/core/testing";
import type { S3StorageOptions } from "../open-s3-storage.js";
import { startFauxqs } from "./start-fauxqs.js";
import { startS3rver } from "./start-s3rver.js";

// For benchmarks: the server in a child process, so its CPU and memory are measured apart.
export { startFauxqsProcess } from "./start-fauxqs.js";
export type { ServerProcess } from "./server-process.js";

// The SDK warns on every client about Node 20 leaving its support window; tests pin Node 20 on purpose.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = "true";

export type S3ServerKind = "s3rver" | "fauxqs";

/** A real S3-protocol server on 127.0.0.1 behind a `FaultProxy` that enforces `If-None-Match: *`. */
export interface S3TestServer {
  readonly kind: S3ServerKind;
  readonly bucket: string;
  /** The server itself, bypassing the proxy. */
  readonly endpoint: string;
  readonly proxy: FaultProxy;
  /** A client straight to the server, for checking what the adapter left behind. */
  readonly client: S3Client;
  /** A fresh, empty `s3://` root: `s3://<bucket>/<name>-<random>`. */
  url(name?: string): string;
  /** `storageOptions` for `openStorage`/`save`/`load`: through the proxy, with this server's workarounds, short retry delays. */
  storageOptions(extra?: S3StorageOptions): StorageOptions;
  stop(): Promise<void>;
}

const CREDENTIALS = { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" };

/**
 * What each server needs from the adapter's options. Production defaults stay right for AWS;
 * only what a test server gets wrong is turned off here.
 */
const WORKAROUNDS: Record<S3ServerKind, S3StorageOptions> = {
  // s3rver stores a streamed body sent with an SDK checksum with its aws-chunked framing
  // (silent corruption). The adapter sends buffers only, but "WHEN_REQUIRED" keeps the SDK
  // from ever choosing that encoding against this server.
  s3rver: { requestChecksumCalculation: "WHEN_REQUIRED" },
  // fauxqs stores an EMPTY object when CompleteMultipartUpload lists part checksums, so parts
  // go without CRC32C here (PutObject keeps it). It rejects request bodies over 11 MiB, so
  // parts stay at the 5 MiB minimum (also what fauxqs demands of every part but the last).
  fauxqs: { checksums: { put: true, multipart: false } },
};

function s3Conflict(): PreconditionEnforcer["conflict"] {
  return {
    status: 412,
    body: '<?xml version="1.0" encoding="UTF-8"?><Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message><Condition>If-None-Match</Condition></Error>',
  };
}

/**
 * Neither s3rver nor fauxqs enforces `If-None-Match: *`, so the proxy does: a PutObject, or a
 * CompleteMultipartUpload (POST ?uploadId=…), carrying it is a conditional create of the path's
 * key; the proxy answers 412 if a HEAD on the real server finds the object.
 */
function ifNoneMatchEnforcer(client: S3Client): PreconditionEnforcer {
  return {
    key({ method, url, headers }) {
      if (headers["if-none-match"] !== "*") return undefined;
      const parsed = new URL(url, "http://proxy");
      const isPut = method === "PUT" && !parsed.searchParams.has("uploadId");
      const isComplete = method === "POST" && parsed.searchParams.has("uploadId");
      return isPut || isComplete ? decodeURIComponent(parsed.pathname) : undefined;
    },
    async exists(key) {
      const [, bucket, ...rest] = key.split("/");
      try {
        await client.send(new HeadObjectCommand({ Bucket: bucket, Key: rest.join("/") }));
        return true;
      } catch (error) {
        if ((error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode === 404) return false;
        throw error;
      }
    },
    conflict: s3Conflict(),
  };
}

/**
 * Starts `kind` on 127.0.0.1 (s3rver in a child process, fauxqs in this one) with one bucket,
 * and a fault proxy in front of it. Throws if the server cannot start: tests fail, never skip.
 *
 * A test of anything that stores checkpoints (a manager run, say) needs a few lines:
 *
 * ```ts
 * const server = await startS3TestServer("fauxqs");
 * await save(state, { checkpointId: server.url("run"), storageOptions: server.storageOptions() });
 * await server.stop();
 * ```
 */
export async function startS3TestServer(kind: S3ServerKind): Promise<S3TestServer> {
  const bucket = "cairn-test";
  const server = kind === "s3rver" ? await startS3rver([bucket]) : await startFauxqs([bucket]);
  const client = new S3Client({
    endpoint: server.endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: CREDENTIALS,
    ...(kind === "s3rver" ? { requestChecksumCalculation: "WHEN_REQUIRED" as const } : {}),
  });
  let proxy: FaultProxy;
  try {
    proxy = await FaultProxy.start(server.endpoint, { preconditions: ifNoneMatchEnforcer(client) });
  } catch (error) {
    client.destroy();
    await server.stop();
    throw error;
  }
  const run = randomBytes(4).toString("hex");
  let roots = 0;
  return {
    kind,
    bucket,
    endpoint: server.endpoint,
    proxy,
    client,
    url: (name = "root") => `s3://${bucket}/${name}-${run}-${roots++}`,
    storageOptions: (extra = {}) => ({
      s3: {
        endpoint: proxy.url,
        region: "us-east-1",
        forcePathStyle: true,
        credentials: CREDENTIALS,
        partSize: 5 << 20,
        concurrency: 4,
        retry: { baseDelayMs: 5, maxDelayMs: 50, maxAttempts: 4 },
        ...WORKAROUNDS[kind],
        ...extra,
      } satisfies S3StorageOptions,
    }),
    async stop() {
      client.destroy();
      await proxy.close();
      await server.stop();
    },
  };
}

type ProxiedRequest = { readonly method: string; readonly url: string };

/** Recognises S3 operations on the wire by method and query, for fault rules and assertions. */
export const s3Operation = {
  putObject: (r: ProxiedRequest): boolean => r.method === "PUT" && r.url.includes("x-id=PutObject"),
  uploadPart: (r: ProxiedRequest): boolean => r.method === "PUT" && r.url.includes("x-id=UploadPart"),
  createMultipartUpload: (r: ProxiedRequest): boolean => r.method === "POST" && /[?&]uploads(&|=|$)/.test(r.url),
  completeMultipartUpload: (r: ProxiedRequest): boolean => r.method === "POST" && r.url.includes("uploadId="),
  abortMultipartUpload: (r: ProxiedRequest): boolean => r.method === "DELETE" && r.url.includes("uploadId="),
  getObject: (r: ProxiedRequest): boolean => r.method === "GET" && r.url.includes("x-id=GetObject"),
  headObject: (r: ProxiedRequest): boolean => r.method === "HEAD",
  listObjects: (r: ProxiedRequest): boolean => r.method === "GET" && r.url.includes("list-type=2"),
  deleteObject: (r: ProxiedRequest): boolean => r.method === "DELETE" && !r.url.includes("uploadId="),
  /** UploadPart of one part number. */
  part:
    (n: number) =>
    (r: ProxiedRequest): boolean =>
      r.method === "PUT" &&
      r.url.includes("x-id=UploadPart") &&
      new URL(r.url, "http://x").searchParams.get("partNumber") === String(n),
};

/** The upload id of the first multipart request the proxy saw, for checking it was aborted. */
export function uploadIdSeen(requests: readonly ProxiedRequest[]): string | undefined {
  for (const r of requests) {
    const id = new URL(r.url, "http://x").searchParams.get("uploadId");
    if (id) return id;
  }
  return undefined;
}

/** An S3 error response body, as a fault the proxy answers with. */
export function s3ErrorBody(code: string, message: string): string {
  return `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${message}</Message><RequestId>fault-proxy</RequestId></Error>`;
}
