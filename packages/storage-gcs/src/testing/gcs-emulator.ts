import { mkdtempSync, rmSync } from "node:fs";
import type { IncomingMessage, Server } from "node:http";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A running Cloud Storage emulator; point a client at `host` (`apiEndpoint`, or `STORAGE_EMULATOR_HOST`). */
export interface GcsEmulator {
  /** `http://127.0.0.1:<port>`: the scheme is required by `STORAGE_EMULATOR_HOST`. */
  readonly host: string;
  readonly port: number;
  /** Wipes every bucket and object. */
  reset(): void;
  /**
   * Makes the emulator name `host` (a proxy in front of it) in the resumable-upload session URLs
   * it hands out, so the upload's bytes go through that proxy too; `undefined` restores its own.
   */
  advertise(host: string | undefined): void;
  stop(): Promise<void>;
}

export interface GcsEmulatorOptions {
  readonly port?: number;
  readonly projectId?: string;
}

// The slice of firebase-tools' internals this helper touches; they ship no type declarations.
interface ExpressLayer {
  handle: ((...args: unknown[]) => unknown) & { stack?: unknown; cairnWrapped?: boolean };
  route?: { stack: ExpressLayer[] };
}
interface ExpressApp {
  _router?: { stack: ExpressLayer[] };
  use(handler: (err: unknown, req: unknown, res: ErrorResponse, next: unknown) => void): void;
  listen(port: number, host: string): Server;
}
interface ErrorResponse {
  headersSent: boolean;
  end(): void;
  status(code: number): { json(body: unknown): void };
}
interface StorageEmulatorLike {
  args: { blobDir: string };
  _rulesRuntime: unknown;
  _rulesManager: unknown;
  reset(): void;
}
interface RegistryEntry {
  getName(): string;
  getInfo(): { name: string; host: string; port: number };
}

const require = createRequire(import.meta.url);
const FIREBASE = "firebase-tools/lib/emulator";

/**
 * Starts the Cloud Storage emulator of firebase-tools in this process, on 127.0.0.1. Its
 * command-line start needs Java and a downloaded rules JAR; its GCS JSON API (what
 * @google-cloud/storage speaks) is plain Node code, started here with the rules runtime
 * replaced by no-ops. Throws if it cannot start: tests must fail, never skip, without a server.
 *
 * Known gaps of this server (worked around in tests, never in the adapter): `createBucket`
 * answers 400 (a bucket appears on its first write); preconditions such as
 * `ifGenerationMatch` are ignored (tests enforce them in a `FaultProxy`); a range starting past
 * the end returns the whole object with 200 (the adapter clips ranges to the object's size).
 */
export async function startGcsEmulator(options: GcsEmulatorOptions = {}): Promise<GcsEmulator> {
  const host = "127.0.0.1";
  const projectId = options.projectId ?? "demo-cairn";
  const { StorageEmulator } = require(`${FIREBASE}/storage/index.js`) as {
    StorageEmulator: new (args: object) => StorageEmulatorLike;
  };
  const { createApp } = require(`${FIREBASE}/storage/server.js`) as {
    createApp: (projectId: string, emulator: unknown) => Promise<ExpressApp>;
  };
  const { EmulatorRegistry } = require(`${FIREBASE}/registry.js`) as {
    EmulatorRegistry: {
      isRunning(name: string): boolean;
      set(name: string, entry: RegistryEntry): void;
      get(name: string): unknown;
      clear(name: string): void;
    };
  };
  const { Emulators } = require(`${FIREBASE}/types.js`) as { Emulators: { STORAGE: string } };

  // Upstream keeps blobs in one fixed tmp directory and deletes it on reset, so two emulators
  // (parallel test files) would wipe each other's objects: each gets its own directory.
  const blobDir = mkdtempSync(join(tmpdir(), "cairn-gcs-emulator-"));
  class IsolatedStorageEmulator extends StorageEmulator {
    getPersistenceTmpDir(): string {
      return this.args.blobDir;
    }
  }
  const emulator = new IsolatedStorageEmulator({
    projectId,
    host,
    port: options.port ?? 0,
    blobDir,
    rules: undefined,
    auto_download: false,
  });
  // The real rules runtime spawns Java; the GCS JSON API (admin path) never consults rules.
  emulator._rulesRuntime = { start: async () => undefined, stop: async () => undefined, alive: false };
  emulator._rulesManager = {
    start: async () => ({ errors: [], warnings: [] }),
    stop: async () => undefined,
    getRuleset: () => undefined,
  };

  // StorageEmulator.start() treats port 0 as its default port and does not await listen: build the app and listen ourselves.
  const app = await createApp(projectId, emulator);
  // Express 4 drops promises of async handlers: a throw there (a malformed request) would be an
  // unhandled rejection and kill the process. Route them to a 500 instead.
  if (app._router) catchAsyncErrors(app._router.stack);
  app.use((err, _req, res) => {
    if (res.headersSent) return res.end();
    res.status(500).json({ error: { code: 500, message: String((err as Error)?.message ?? err) } });
  });
  let server: Server;
  try {
    server = await new Promise<Server>((resolve, reject) => {
      const s = app.listen(options.port ?? 0, host);
      s.once("listening", () => resolve(s));
      s.once("error", reject);
    });
  } catch (error) {
    rmSync(blobDir, { recursive: true, force: true });
    throw new Error(`the Cloud Storage emulator could not listen on ${host}: ${(error as Error).message}`, {
      cause: error,
    });
  }
  const port = (server.address() as AddressInfo).port;
  // Node closes idle keep-alive sockets after 5 s, racing a client that reuses one at that moment
  // ("socket hang up"); GCS's front ends keep them far longer, so the emulator does too.
  server.keepAliveTimeout = 120_000;
  let advertised: string | undefined;
  // Session URLs are built from the request's Host header, which a proxy rewrites to the emulator's own.
  server.prependListener("request", (req: IncomingMessage) => {
    if (advertised) req.headers.host = advertised;
  });

  // The emulator builds selfLink/mediaLink from a process-wide registry; without an entry every
  // object request throws. With several emulators in one process the links name the first one,
  // which the SDK never follows.
  const entry: RegistryEntry = {
    getName: () => Emulators.STORAGE,
    getInfo: () => ({ name: Emulators.STORAGE, host, port }),
  };
  if (!EmulatorRegistry.isRunning(Emulators.STORAGE)) EmulatorRegistry.set(Emulators.STORAGE, entry);

  let stopped: Promise<void> | undefined;
  return {
    host: `http://${host}:${port}`,
    port,
    reset: () => emulator.reset(),
    advertise: (publicHost) => {
      advertised = publicHost === undefined ? undefined : new URL(publicHost).host;
    },
    stop: () =>
      (stopped ??= (async () => {
        await new Promise<void>((resolve, reject) => {
          server.close((error) => (error ? reject(error) : resolve()));
          // Keep-alive sockets of the SDK's agent would otherwise hold close() open.
          server.closeAllConnections();
        });
        if (EmulatorRegistry.get(Emulators.STORAGE) === entry) EmulatorRegistry.clear(Emulators.STORAGE);
        rmSync(blobDir, { recursive: true, force: true });
      })()),
  };
}

function catchAsyncErrors(stack: ExpressLayer[]): void {
  for (const layer of stack) {
    if (layer.route) catchAsyncErrors(layer.route.stack);
    else if (Array.isArray(layer.handle.stack)) catchAsyncErrors(layer.handle.stack as ExpressLayer[]);
    else wrapLayer(layer);
  }
}

function wrapLayer(layer: ExpressLayer): void {
  const handle = layer.handle;
  // Four parameters mark an Express error handler, which must keep its arity.
  if (handle.length === 4 || handle.cairnWrapped) return;
  const wrapped = function (this: unknown, req: unknown, res: unknown, next: (error?: unknown) => void): unknown {
    try {
      const result = handle.call(this, req, res, next);
      if (result instanceof Promise) result.catch(next);
      return result;
    } catch (error) {
      next(error);
      return undefined;
    }
  } as ExpressLayer["handle"];
  wrapped.cairnWrapped = true;
  layer.handle = wrapped;
}
