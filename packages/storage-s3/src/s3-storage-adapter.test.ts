import { openStorage } from "@cairn/core";
import { storageContractSuite } from "@cairn/core/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type S3ServerKind, type S3TestServer, startS3TestServer } from "../test/s3-test-server.js";
import "./index.js";

for (const kind of ["s3rver", "fauxqs"] as const satisfies readonly S3ServerKind[]) {
  describe(kind, () => {
    let server: S3TestServer;
    beforeAll(async () => {
      server = await startS3TestServer(kind);
    });
    afterAll(async () => {
      await server?.stop();
    });

    // 48 MiB in 1 MiB chunks: ten 5 MiB parts, uploaded four at a time.
    storageContractSuite(`s3:// on ${kind}`, { open: () => openStorage(server.url("contract"), server.storageOptions()) });
  });
}
