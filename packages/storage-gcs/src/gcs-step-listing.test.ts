import { stepListingSuite } from "@cairn/manager/testing";
import { afterAll, beforeAll } from "vitest";
import "./index.js";
import { type GcsTestServer, startGcsTestServer } from "./testing/gcs-test-server.js";

let server: GcsTestServer;
beforeAll(async () => {
  server = await startGcsTestServer();
});
afterAll(async () => {
  await server?.stop();
});

/** A JSON API objects.list: GET of a bucket's `/o` collection (not of one object under it). */
const isList = (r: { method: string; url: string }): boolean =>
  r.method === "GET" && /\/b\/[^/]+\/o$/.test(new URL(r.url, "http://proxy").pathname);

stepListingSuite("LIST requests of a manager on gs:// (firebase-tools emulator)", {
  url: () => server.location("steps"),
  storageOptions: () => server.storageOptions,
  listRequests: () => server.proxy.requests.filter(isList).length,
});
