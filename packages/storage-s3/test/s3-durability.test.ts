import { openStorage } from "@cairn/core";
import { type DurableTier, durabilityPropertySuite, durabilitySuite } from "@cairn/manager/testing";
import { afterAll, beforeAll } from "vitest";
import "../src/index.js";
import { type S3TestServer, s3ErrorBody, startS3TestServer } from "../src/testing/s3-test-server.js";

// The manager's durability contract with s3:// as the durable tier, on fauxqs behind the fault
// proxy: an outage is every request answered 503 SlowDown (retried by the adapter, then by replication).
let server: S3TestServer;
beforeAll(async () => {
  server = await startS3TestServer("fauxqs");
});
afterAll(async () => {
  await server?.stop();
});

async function durable(): Promise<DurableTier> {
  const url = server.url("durability");
  return {
    location: url,
    // Straight to the server, past the proxy: it works during an outage.
    storage: await openStorage(url, server.storageOptions({ endpoint: server.endpoint })),
    outage: {
      start: () =>
        server.proxy.addRule({
          times: Infinity,
          action: { kind: "status", status: 503, body: s3ErrorBody("SlowDown", "Please reduce your request rate.") },
        }),
      end: () => server.proxy.clearRules(),
    },
  };
}

durabilitySuite("s3:// on fauxqs", { storageOptions: () => server.storageOptions(), durable });
// Two of the memory:// run's seeds: the whole suite's time budget is shared.
durabilityPropertySuite("s3:// on fauxqs", { storageOptions: () => server.storageOptions(), durable, seeds: [8, 103] });
