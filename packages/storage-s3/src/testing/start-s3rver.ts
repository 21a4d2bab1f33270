import { mkdtemp } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ServerProcess, startServerProcess } from "./server-process.js";

// Runs in the child (CommonJS). The child removes its data directory itself on the way out,
// so the directory goes even when the parent is killed.
const CHILD = `
const S3rver = require(process.env.S3RVER_MAIN);
const opts = JSON.parse(process.env.S3RVER_OPTS);
const server = new S3rver(opts);
// s3rver 3.7.1 answers a Range on an EMPTY object with 206 "bytes 0-0/0" and Content-Length 1,
// then never sends the byte: the client hangs until the server drops the connection. AWS
// answers 416 InvalidRange, which the adapter handles; this shim makes s3rver do the same.
server.middleware.unshift(async (ctx, next) => {
  await next();
  if (ctx.status === 206 && ctx.response.get("Content-Range").endsWith("/0")) {
    if (ctx.body && typeof ctx.body.destroy === "function") ctx.body.destroy();
    ctx.remove("Content-Range");
    ctx.status = 416;
    ctx.type = "application/xml";
    ctx.body = '<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidRange</Code><Message>The requested range is not satisfiable</Message></Error>';
  }
});
let closing = false;
const shutdown = () => {
  if (closing) return;
  closing = true;
  const done = () => {
    try { require("fs").rmSync(opts.directory, { recursive: true, force: true }); } catch {}
    process.exit(0);
  };
  server.close().catch(() => {}).finally(done);
  setTimeout(done, 2000).unref();
};
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
process.on("disconnect", shutdown);
server.run().then(
  (address) => process.send({ type: "ready", port: address.port }),
  (error) => { console.error((error && error.stack) || String(error)); process.exit(1); },
);
`;

/**
 * Starts s3rver 3.7.1 on 127.0.0.1 with `buckets` created, in a child process: s3rver encrypts
 * ListObjectsV2 continuation tokens with DES, which OpenSSL 3 keeps in its legacy provider, so
 * every truncated listing answers 500 unless the server runs with --openssl-legacy-provider.
 * The flag stays out of the test runner by running s3rver in its own process.
 */
export async function startS3rver(buckets: readonly string[]): Promise<ServerProcess> {
  const directory = await mkdtemp(join(tmpdir(), "cairn-s3rver-"));
  return startServerProcess("s3rver", CHILD, {
    nodeArgs: ["--openssl-legacy-provider"],
    env: {
      NODE_OPTIONS: "--openssl-legacy-provider",
      S3RVER_MAIN: createRequire(import.meta.url).resolve("s3rver"),
      S3RVER_OPTS: JSON.stringify({
        address: "127.0.0.1",
        port: 0,
        silent: true,
        directory,
        configureBuckets: buckets.map((name) => ({ name, configs: [] })),
      }),
    },
  });
}
