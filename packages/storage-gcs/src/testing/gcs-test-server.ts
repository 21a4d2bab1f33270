import type { RetryPolicy, StorageOptions } from "@cairn/core";
import { FaultProxy, type PreconditionEnforcer } from "@cairn/core/testing";
import { type GcsEmulator, startGcsEmulator } from "./gcs-emulator.js";

/** An emulator behind a fault proxy, ready for `openStorage(server.location(), server.storageOptions)`. */
export interface GcsTestServer {
  readonly emulator: GcsEmulator;
  /** Every request of the adapter passes it: add fault rules here. */
  readonly proxy: FaultProxy;
  /** The `{ gs: {...} }` storage options reaching the emulator through the proxy, with short retry delays. */
  readonly storageOptions: StorageOptions;
  /** A `gs://` URL of a fresh, empty location (a new prefix in the test bucket). */
  location(name?: string): string;
  stop(): Promise<void>;
}

export interface GcsTestServerOptions {
  /** Retry bounds for adapters opened with `storageOptions` (default: core's attempts, delays of a few ms). */
  readonly retry?: Partial<RetryPolicy>;
  /** The bucket locations are made in (default "cairn-test"); the emulator creates it on first write. */
  readonly bucket?: string;
}

/**
 * Starts the firebase-tools Cloud Storage emulator in this process with a `FaultProxy` in
 * front that enforces `ifGenerationMatch=0`, which the emulator ignores: without it an
 * `ifAbsent` write would silently replace an object, and commit races would go unnoticed.
 * For adapter tests and for any test that needs a `gs://` location (a manager run):
 *
 * ```ts
 * const server = await startGcsTestServer();
 * const manager = new CheckpointManager(server.location("run1"), { storageOptions: server.storageOptions });
 * ```
 * Throws if the emulator cannot start, so such tests fail rather than skip.
 */
export async function startGcsTestServer(options: GcsTestServerOptions = {}): Promise<GcsTestServer> {
  const emulator = await startGcsEmulator();
  const proxy = await FaultProxy.start(emulator.host, { preconditions: generationZeroEnforcer(emulator.host) });
  emulator.advertise(proxy.url);
  const bucket = options.bucket ?? "cairn-test";
  let locations = 0;
  return {
    emulator,
    proxy,
    storageOptions: {
      gs: {
        apiEndpoint: proxy.url,
        projectId: "demo-cairn",
        retry: options.retry ?? { baseDelayMs: 2, maxDelayMs: 20 },
      },
    },
    location: (name = "root") => `gs://${bucket}/${name}-${process.pid}-${locations++}`,
    stop: async () => {
      await proxy.close();
      await emulator.stop();
    },
  };
}

/**
 * Recognises GCS conditional creates: a single-request upload with `ifGenerationMatch=0`, and
 * both requests of a resumable one (the session start carries the condition; the upload of
 * the bytes, to the session URL, does not, so the object name is remembered). Checking at the
 * upload of the bytes is what makes racing resumable creates see each other.
 */
function generationZeroEnforcer(emulatorHost: string): PreconditionEnforcer {
  const conditionalSessions = new Map<string, number>();
  return {
    key: ({ method, url }) => {
      const parsed = new URL(url, "http://proxy");
      const bucket = /^\/(?:upload\/)?storage\/v1\/b\/([^/]+)\/o$/.exec(parsed.pathname)?.[1];
      const name = parsed.searchParams.get("name");
      if (bucket === undefined || name === null) return undefined;
      const key = `${decodeURIComponent(bucket)}/${name}`;
      if (method === "POST" && parsed.searchParams.get("ifGenerationMatch") === "0") {
        if (parsed.searchParams.get("uploadType") === "resumable")
          conditionalSessions.set(key, (conditionalSessions.get(key) ?? 0) + 1);
        return key;
      }
      const sessions = conditionalSessions.get(key) ?? 0;
      if (method === "PUT" && parsed.searchParams.has("upload_id") && sessions > 0) {
        if (sessions === 1) conditionalSessions.delete(key);
        else conditionalSessions.set(key, sessions - 1);
        return key;
      }
      return undefined;
    },
    exists: async (key) => {
      const slash = key.indexOf("/");
      const response = await fetch(
        `${emulatorHost}/storage/v1/b/${encodeURIComponent(key.slice(0, slash))}/o/${encodeURIComponent(key.slice(slash + 1))}`,
      );
      await response.arrayBuffer();
      if (response.status === 404) return false;
      if (response.ok) return true;
      throw new Error(`the emulator answered ${response.status} for ${key}`);
    },
    conflict: {
      status: 412,
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        error: {
          code: 412,
          message: "At least one of the pre-conditions you specified did not hold.",
          errors: [{ reason: "conditionNotMet" }],
        },
      }),
    },
  };
}
