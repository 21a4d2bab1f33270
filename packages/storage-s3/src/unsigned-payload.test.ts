import { createHash, randomBytes } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import { type StorageAdapter, openStorage } from "@cairn/core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type S3TestServer, s3Operation, startS3TestServer } from "./testing/s3-test-server.js";
import "./index.js";

const MiB = 1 << 20;

/** What each upload request (PutObject, UploadPart) said about its body. */
interface UploadSeen {
  readonly contentSha256: string | undefined;
  readonly checksums: string[];
}

function uploadSeen(headers: IncomingHttpHeaders): UploadSeen {
  const sha = headers["x-amz-content-sha256"];
  return {
    contentSha256: typeof sha === "string" ? sha : undefined,
    checksums: Object.keys(headers).filter((name) => name.startsWith("x-amz-checksum-")),
  };
}

for (const kind of ["s3rver", "fauxqs"] as const) {
  describe(`upload bodies and their checksums, ${kind}`, { timeout: 60_000 }, () => {
    let server: S3TestServer;
    let storage: StorageAdapter | undefined;
    let seen: UploadSeen[];
    beforeAll(async () => {
      server = await startS3TestServer(kind);
    });
    afterAll(async () => {
      await server?.stop();
    });
    afterEach(async () => {
      server.proxy.clearRules();
      await storage?.close();
      storage = undefined;
    });

    async function upload(name: string, extra: Parameters<S3TestServer["storageOptions"]>[0]): Promise<Uint8Array> {
      seen = [];
      // Matches nothing: only looks at every upload's headers on their way through.
      server.proxy.addRule({
        match: (r) => {
          if (s3Operation.putObject(r) || s3Operation.uploadPart(r)) seen.push(uploadSeen(r.headers));
          return false;
        },
        times: Infinity,
        action: { kind: "delay", ms: 0 },
      });
      storage = await openStorage(server.url(name), server.storageOptions(extra));
      const small = randomBytes(1000);
      const big = randomBytes(12 * MiB + 5);
      await storage.write("small.bin", small);
      await storage.write("big.bin", big, { size: big.byteLength });
      expect(Buffer.from(await storage.read("small.bin")).equals(small)).toBe(true);
      expect(Buffer.from(await storage.read("big.bin")).equals(big)).toBe(true);
      return big;
    }

    it("sends a body with a checksum the server verifies unsigned: no SHA-256 of it on the client", async () => {
      await upload("unsigned", {});
      // One PutObject and three 5 MiB parts.
      expect(seen).toHaveLength(4);
      for (const request of seen) {
        expect(request.checksums).not.toEqual([]);
        expect(request.contentSha256).toBe("UNSIGNED-PAYLOAD");
      }
    });

    it("signs a body sent without any checksum over its SHA-256, as before", async () => {
      await upload("signed", {
        checksums: { put: false, multipart: false },
        requestChecksumCalculation: "WHEN_REQUIRED",
      });
      expect(seen).toHaveLength(4);
      for (const request of seen) {
        expect(request.checksums).toEqual([]);
        expect(request.contentSha256).toMatch(/^[0-9a-f]{64}$/);
        expect(request.contentSha256).not.toBe(createHash("sha256").digest("hex"));
      }
    });
  });
}
