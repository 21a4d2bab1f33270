import { managerRunSuite, tieredRunSuite } from "@cairn/manager/testing";
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

managerRunSuite("gs:// on the firebase-tools emulator", {
  url: () => server.location("manager"),
  storageOptions: () => server.storageOptions,
});
tieredRunSuite("gs:// on the firebase-tools emulator", {
  url: () => server.location("tiered"),
  storageOptions: () => server.storageOptions,
  outage: {
    start: () => server.proxy.addRule({ times: Infinity, action: { kind: "status", status: 503 } }),
    end: () => server.proxy.clearRules(),
  },
});
