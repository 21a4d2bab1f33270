import { stepListingSuite } from "@cairn/manager/testing";
import { afterAll, beforeAll, describe } from "vitest";
import "../src/index.js";
import { type S3TestServer, s3Operation, startS3TestServer } from "../src/testing/s3-test-server.js";

for (const kind of ["s3rver", "fauxqs"] as const) {
  describe(`LIST requests of a manager on s3:// (${kind})`, () => {
    let server: S3TestServer;
    beforeAll(async () => {
      server = await startS3TestServer(kind);
    });
    afterAll(async () => {
      await server?.stop();
    });
    stepListingSuite(`a root of many steps on ${kind}`, {
      url: () => server.url("steps"),
      storageOptions: () => server.storageOptions(),
      listRequests: () => server.proxy.requests.filter(s3Operation.listObjects).length,
    });
  });
}
