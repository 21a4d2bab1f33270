// Every upload's CRC32C as the server gets it: derived from core's block CRC32Cs (no pass over
// the bytes), it must still be the CRC32C of the bytes sent, and a wrong one must be refused.
import { S3Client } from "@aws-sdk/client-s3";
import { type HostTensor, type StateDict, CheckpointError, hostTensor, load, openStorage, save } from "@cairn/core";
import { crc32c } from "@cairn/core/format";
import { seededRandom } from "@cairn/core/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import "../src/index.js";
import type { S3StorageOptions } from "../src/open-s3-storage.js";
import { withoutListedPartChecksums } from "../src/testing/fauxqs-part-checksums.js";
import { type S3TestServer, startS3TestServer } from "../src/testing/s3-test-server.js";

const MiB = 1 << 20;

interface Upload {
  readonly op: string;
  readonly sent: string | undefined;
  readonly actual: string;
}

type Request = { headers: Record<string, string>; body?: unknown; query?: Record<string, unknown> };
type Handler<A, R> = (args: A) => Promise<R>;

/**
 * A client that checks each PutObject and UploadPart as S3 does: a body whose
 * `x-amz-checksum-crc32c` is not its CRC32C is refused with BadDigest before it is stored.
 * Every upload is recorded.
 */
function verifyingClient(options: S3StorageOptions, uploads: Upload[]): S3Client {
  const client = new S3Client({
    endpoint: options.endpoint!,
    region: options.region!,
    forcePathStyle: true,
    credentials: options.credentials!,
    maxAttempts: 1,
  });
  const verify =
    <A extends { request: unknown }, R>(next: Handler<A, R>): Handler<A, R> =>
    async (args) => {
      const request = args.request as Request;
      if (request.body instanceof Uint8Array) {
        const sent = request.headers["x-amz-checksum-crc32c"];
        const actual = Buffer.alloc(4);
        actual.writeUInt32BE(crc32c(request.body));
        const op = request.query?.["partNumber"] !== undefined ? "UploadPart" : "PutObject";
        uploads.push({ op, sent, actual: actual.toString("base64") });
        if (sent !== undefined && sent !== actual.toString("base64"))
          throw Object.assign(new Error("The CRC32C you specified did not match the calculated checksum."), {
            name: "BadDigest",
            Code: "BadDigest",
            $fault: "client",
            $metadata: { httpStatusCode: 400 },
          });
      }
      return next(args);
    };
  client.middlewareStack.add(verify, { step: "deserialize", name: "verifyChecksumAsS3Does" });
  return client;
}

/** Tensors of seeded random sizes and shapes (so block sizes and part cuts vary), one of them large. */
function stateDict(seed: number): StateDict {
  const random = seededRandom(seed);
  const tensors: Record<string, HostTensor> = {};
  for (let t = 0; t < 6; t++) {
    const columns = 1 + Math.floor(random() * 3000);
    const rows = 1 + Math.floor(random() * (t === 0 ? 4000 : 300));
    const data = new Float32Array(rows * columns);
    for (let i = 0; i < data.length; i += 7) data[i] = random();
    tensors[`t${t}`] = hostTensor("float32", [rows, columns], data);
  }
  return { tensors, note: new Uint8Array(Math.floor(random() * 5000)).fill(9) };
}

for (const kind of ["s3rver", "fauxqs"] as const) {
  describe(`part checksums from core's block CRC32Cs, ${kind}`, { timeout: 60_000 }, () => {
    let server: S3TestServer;
    beforeAll(async () => {
      server = await startS3TestServer(kind);
    });
    afterAll(async () => {
      await server?.stop();
    });

    /** Storage options with every checksum on, as against AWS; on fauxqs its Complete is shimmed. */
    const optionsWith = (uploads: Upload[]) => {
      const s3 = server.storageOptions().s3 as S3StorageOptions;
      const client = verifyingClient(s3, uploads);
      if (kind === "fauxqs") withoutListedPartChecksums(client);
      return { client, storageOptions: server.storageOptions({ client, checksums: { put: true, multipart: true } }) };
    };

    it("sends every part and object with the CRC32C of its bytes, for seeded random layouts", async () => {
      for (const seed of [1, 2, 3]) {
        const uploads: Upload[] = [];
        const { client, storageOptions } = optionsWith(uploads);
        try {
          const url = server.url(`layout-${seed}`);
          const state = stateDict(seed);
          await save(state, { checkpointId: url, storageOptions });
          const parts = uploads.filter((u) => u.op === "UploadPart");
          expect(parts.length, `seed ${seed}`).toBeGreaterThan(1);
          for (const u of uploads) expect(u.sent, `seed ${seed}, ${u.op}`).toBe(u.actual);
          const loaded = (await load({ checkpointId: url, storageOptions })) as { tensors: Record<string, HostTensor> };
          const saved = (state as { tensors: Record<string, HostTensor> }).tensors;
          for (const [name, t] of Object.entries(saved))
            expect(Buffer.from(loaded.tensors[name]!.data.buffer).equals(Buffer.from(t.data.buffer)), name).toBe(true);
        } finally {
          client.destroy();
        }
      }
    });

    it("sends the writer's CRC32C as given: a wrong one is refused, and the write leaves no object", async () => {
      const uploads: Upload[] = [];
      const { client, storageOptions } = optionsWith(uploads);
      const storage = await openStorage(server.url("wrong"), storageOptions);
      try {
        const body = new Uint8Array(11 * MiB).fill(5);
        const wrong = { of: async (bytes: Uint8Array) => (crc32c(bytes) ^ 1) >>> 0 };
        const error = await storage.write("big.bin", body, { size: body.byteLength, crc32c: wrong }).catch((e) => e);
        expect(error).toBeInstanceOf(CheckpointError);
        expect(String(error.message)).toMatch(/BadDigest|CRC32C/);
        expect(await storage.stat("big.bin")).toBeNull();
        const small = await storage.write("small.bin", body.subarray(0, 1000), { crc32c: wrong }).catch((e) => e);
        expect(small).toBeInstanceOf(CheckpointError);
        expect(await storage.stat("small.bin")).toBeNull();
        // The same bytes with their own checksums go up.
        await storage.write("big.bin", body, { size: body.byteLength });
        expect((await storage.stat("big.bin"))?.size).toBe(body.byteLength);
      } finally {
        await storage.close();
        client.destroy();
      }
    });
  });
}
