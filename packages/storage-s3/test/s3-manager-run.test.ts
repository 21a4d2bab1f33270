import { managerRunSuite } from "@cairn/manager/testing";
import { afterAll, beforeAll, describe } from "vitest";
import "../src/index.js";
import { type S3ServerKind, type S3TestServer, startS3TestServer } from "./s3-test-server.js";

for (const kind of ["s3rver", "fauxqs"] as const satisfies readonly S3ServerKind[]) {
  describe(kind, () => {
    let server: S3TestServer;
    beforeAll(async () => {
      server = await startS3TestServer(kind);
    });
    afterAll(async () => {
      await server?.stop();
    });
    managerRunSuite(`s3:// on ${kind}`, { url: () => server.url("manager"), storageOptions: () => server.storageOptions() });
  });
}
