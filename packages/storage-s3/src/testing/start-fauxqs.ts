import { type ServerProcess, startServerProcess } from "./server-process.js";

/** fauxqs answers on 127.0.0.1 only, in this process or in a child. */
export interface FauxqsServer {
  readonly endpoint: string;
  stop(): Promise<void>;
}

// fauxqs authenticates nothing, so a bare PUT creates a bucket.
async function createBuckets(endpoint: string, buckets: readonly string[]): Promise<void> {
  for (const bucket of buckets) {
    const response = await fetch(`${endpoint}/${encodeURIComponent(bucket)}`, { method: "PUT" });
    await response.arrayBuffer();
    if (!response.ok) throw new Error(`fauxqs: creating bucket ${bucket} answered HTTP ${response.status}`);
  }
}

/**
 * Starts fauxqs 1.9.2 (the last release that runs on Node 20) in this process. `buildApp` and
 * our own listen are used instead of `startFauxqs`, which binds 0.0.0.0: tests listen on
 * 127.0.0.1 only.
 */
export async function startFauxqs(buckets: readonly string[]): Promise<FauxqsServer> {
  // Imported when used: fauxqs is an optional peer of the published package.
  const { buildApp } = await import("fauxqs");
  const app = buildApp({ logger: false });
  await app.listen({ host: "127.0.0.1", port: 0 });
  const address = app.server.address();
  if (address === null || typeof address === "string") throw new Error("fauxqs did not report a TCP port");
  const endpoint = `http://127.0.0.1:${address.port}`;
  await createBuckets(endpoint, buckets);
  return { endpoint, stop: () => app.close() };
}

const CHILD = `
const { buildApp } = await import(process.env.FAUXQS_URL);
const app = buildApp({ logger: false });
await app.listen({ host: "127.0.0.1", port: 0 });
const shutdown = () => app.close().finally(() => process.exit(0));
process.on("SIGTERM", shutdown);
process.on("disconnect", shutdown);
process.send({ type: "ready", port: app.server.address().port });
`;

/** fauxqs in a child process, so a benchmark measures the client's memory and CPU apart from the server's. */
export async function startFauxqsProcess(buckets: readonly string[]): Promise<ServerProcess> {
  const server = await startServerProcess("fauxqs", CHILD, {
    nodeArgs: ["--input-type=module"],
    env: { FAUXQS_URL: import.meta.resolve("fauxqs") },
  });
  try {
    await createBuckets(server.endpoint, buckets);
  } catch (error) {
    await server.stop();
    throw error;
  }
  return server;
}
