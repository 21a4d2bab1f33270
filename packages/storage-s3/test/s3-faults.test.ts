import { randomBytes } from "node:crypto";
import { S3Client } from "@aws-sdk/client-s3";
import { type HostTensor, type StateDict, type StorageAdapter, hostTensor, load, openStorage, save } from "@cairn/core";
import { type FaultAction, rejection } from "@cairn/core/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import "../src/index.js";
import { type S3TestServer, s3ErrorBody, s3Operation, startS3TestServer } from "../src/testing/s3-test-server.js";

const MiB = 1 << 20;
/** Short enough that a stalled request costs the test little, long enough for a loaded machine's honest requests. */
const PROGRESS_MS = 600;

async function* streamed(data: Uint8Array): AsyncGenerator<Uint8Array> {
  for (let at = 0; at < data.byteLength; at += MiB) yield data.subarray(at, at + MiB);
}

async function paths(storage: StorageAdapter, prefix = ""): Promise<string[]> {
  const out: string[] = [];
  for await (const o of storage.list(prefix)) out.push(o.path);
  return out.sort();
}

/** A state dict with a 12 MiB tensor (a multipart upload of 5 MiB parts) and small values. */
function stateDict(): StateDict {
  return {
    model: {
      weights: hostTensor("float32", [3 * 1024, 1024], new Float32Array(randomBytes(12 * MiB).buffer)),
      bias: hostTensor("float64", [5], Float64Array.from([1, 2, 3, 4, 5])),
    },
    rng: new Uint8Array(randomBytes(1000)),
    step: 7,
  };
}

function bytesOf(tensor: unknown): Buffer {
  const { data } = tensor as HostTensor;
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

for (const kind of ["s3rver", "fauxqs"] as const) {
  describe(`s3:// fault suite on ${kind}`, { timeout: 60_000 }, () => {
    let server: S3TestServer;
    let storage: StorageAdapter | undefined;
    beforeAll(async () => {
      server = await startS3TestServer(kind);
    });
    afterAll(async () => {
      await server?.stop();
    });
    afterEach(async () => {
      server.proxy.clearRules();
      server.proxy.requests.length = 0;
      await storage?.close();
      storage = undefined;
    });

    async function open(
      name: string,
      extra: Parameters<S3TestServer["storageOptions"]>[0] = {},
    ): Promise<StorageAdapter> {
      storage = await openStorage(
        server.url(name),
        server.storageOptions({ progressTimeoutMs: PROGRESS_MS, ...extra }),
      );
      return storage;
    }

    describe("reads", () => {
      it("retries a ranged read whose body stalls, and returns the right bytes", async () => {
        const s = await open("stall-read");
        const data = randomBytes(12 * MiB + 5);
        await s.write("blob", data);
        server.proxy.addRule({
          match: s3Operation.getObject,
          action: { kind: "stall", phase: "response", afterBytes: MiB },
        });
        const back = await s.read("blob", { offset: 3, length: 11 * MiB });
        expect(Buffer.from(back).equals(data.subarray(3, 3 + 11 * MiB))).toBe(true);
        expect(server.proxy.faults("stall")).toHaveLength(1);
        // 11 MiB in 5 MiB parts: three GETs, and the stalled one again.
        expect(server.proxy.requests.filter(s3Operation.getObject)).toHaveLength(4);
      });

      it("watches progress itself on a client it was given, which has no socket timeout", async () => {
        const direct = new S3Client({
          endpoint: server.proxy.url,
          region: "us-east-1",
          forcePathStyle: true,
          credentials: { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" },
          maxAttempts: 1,
        });
        try {
          const s = await open("stall-client", {
            client: direct,
            retry: { baseDelayMs: 5, maxDelayMs: 50, maxAttempts: 2 },
          });
          const data = randomBytes(2 * MiB);
          await s.write("blob", data);
          server.proxy.addRule({
            match: s3Operation.getObject,
            action: { kind: "stall", phase: "response", afterBytes: 1000 },
          });
          expect(Buffer.from(await s.read("blob")).equals(data)).toBe(true);

          server.proxy.addRule({
            match: s3Operation.getObject,
            times: Infinity,
            action: { kind: "stall", phase: "response", afterBytes: 1000 },
          });
          const error = await rejection(s.read("blob"));
          expect(error.code).toBe("storage");
          expect(error.transient).toBe(false);
          expect(error.message).toMatch(
            new RegExp(
              `^\\[s3\\] reading s3://cairn-test/stall-client-[^ ]+/blob made no progress for ${PROGRESS_MS} ms and was aborted.*\\(gave up after 2 attempts\\)$`,
            ),
          );
          // A stall before the answer's headers is caught the same way.
          server.proxy.clearRules();
          server.proxy.addRule({ match: s3Operation.headObject, action: { kind: "stall", phase: "request" } });
          expect(await s.stat("blob")).toMatchObject({ size: 2 * MiB });
        } finally {
          direct.destroy();
        }
      });

      it("retries a read reset mid-body", async () => {
        const s = await open("reset-read");
        const data = randomBytes(7 * MiB);
        await s.write("blob", data);
        server.proxy.addRule({
          match: s3Operation.getObject,
          times: 2,
          action: { kind: "reset", phase: "response", afterBytes: 2 * MiB },
        });
        expect(Buffer.from(await s.read("blob")).equals(data)).toBe(true);
        expect(server.proxy.faults("reset")).toHaveLength(2);
      });

      it("never returns a short body: an answer with fewer bytes than its range is retried", async () => {
        const s = await open("short-read");
        const data = randomBytes(1000);
        await s.write("blob", data);
        // A well-framed 206 that claims the whole range but carries 10 bytes.
        server.proxy.addRule({
          match: s3Operation.getObject,
          action: {
            kind: "status",
            status: 206,
            body: "0123456789",
            headers: { "content-type": "application/octet-stream", "content-range": "bytes 0-999/1000" },
          },
        });
        expect(Buffer.from(await s.read("blob")).equals(data)).toBe(true);
        expect(server.proxy.requests.filter(s3Operation.getObject)).toHaveLength(2);
      });
    });

    describe("lost responses: the request took effect, its answer never came", () => {
      const lose: FaultAction = { kind: "lose" };

      it("a create-only PutObject: the retry's 412 is the adapter's own write, and save commits", async () => {
        const url = server.url("lost-commit");
        const options = {
          checkpointId: url,
          storageOptions: server.storageOptions({ progressTimeoutMs: PROGRESS_MS }),
        };
        server.proxy.addRule({
          match: (r) => s3Operation.putObject(r) && r.url.includes("metadata.json"),
          action: lose,
        });
        const state = stateDict();
        await save(state, options);
        expect(server.proxy.faults().map((f) => f.fault)).toEqual(["lose", "precondition"]);
        const back = (await load(options)) as { model: Record<string, HostTensor> };
        expect(bytesOf(back.model.weights).equals(bytesOf((state.model as Record<string, HostTensor>).weights))).toBe(
          true,
        );
      });

      it("a create-only PutObject on the adapter: the retry's 412 finds the same bytes, so the write succeeded", async () => {
        const s = await open("lost-put");
        server.proxy.addRule({ match: s3Operation.putObject, action: lose });
        await s.write("once", new Uint8Array([1, 2, 3]), { ifAbsent: true });
        expect(server.proxy.faults().map((f) => f.fault)).toEqual(["lose", "precondition"]);
        expect(Buffer.from(await s.read("once"))).toEqual(Buffer.from([1, 2, 3]));
        // Different bytes there are another writer's: already_exists, even after an unanswered attempt.
        server.proxy.addRule({
          match: s3Operation.putObject,
          action: { kind: "status", status: 503, body: s3ErrorBody("SlowDown", "Please reduce your request rate.") },
        });
        expect((await rejection(s.write("once", new Uint8Array([1, 2, 4]), { ifAbsent: true }))).code).toBe(
          "already_exists",
        );
      });

      it("a plain PutObject, an UploadPart and a CompleteMultipartUpload", async () => {
        const s = await open("lost-writes");
        server.proxy.addRule({ match: s3Operation.putObject, action: lose });
        server.proxy.addRule({ match: s3Operation.part(2), action: lose });
        server.proxy.addRule({ match: s3Operation.completeMultipartUpload, action: lose });
        const small = randomBytes(1000);
        const big = randomBytes(13 * MiB);
        await s.write("small", small);
        await s.write("big", streamed(big));
        expect(server.proxy.faults("lose").map((f) => f.method)).toEqual(["PUT", "PUT", "POST"]);
        expect(Buffer.from(await s.read("small")).equals(small)).toBe(true);
        expect(Buffer.from(await s.read("big")).equals(big)).toBe(true);
      });

      it("a DELETE, a HEAD, a LIST and a GET", async () => {
        const s = await open("lost-others");
        await s.write("a", new Uint8Array([1]));
        await s.write("b", new Uint8Array([2, 2]));
        for (const match of [
          s3Operation.deleteObject,
          s3Operation.headObject,
          s3Operation.listObjects,
          s3Operation.getObject,
        ])
          server.proxy.addRule({ match, action: lose });
        await s.delete("a");
        expect(await s.stat("b")).toMatchObject({ path: "b", size: 2 });
        expect(await paths(s)).toEqual(["b"]);
        expect(Buffer.from(await s.read("b"))).toEqual(Buffer.from([2, 2]));
        expect(server.proxy.faults("lose").map((f) => f.method)).toEqual(["DELETE", "HEAD", "GET", "GET"]);
      });
    });

    describe("storms", () => {
      it("rides out 503 SlowDown and 429 storms on every kind of request", async () => {
        // Up to all eight faults may land on one request (the first runs alone): nine attempts ride it out.
        const s = await open("storm", { retry: { baseDelayMs: 1, maxDelayMs: 10, maxAttempts: 9 } });
        server.proxy.addRule({
          times: 4,
          action: { kind: "status", status: 503, body: s3ErrorBody("SlowDown", "Please reduce your request rate.") },
        });
        server.proxy.addRule({
          times: 4,
          action: { kind: "status", status: 429, body: s3ErrorBody("TooManyRequests", "Too many requests") },
        });
        const data = randomBytes(11 * MiB);
        await s.write("big", streamed(data));
        await s.write("small", new Uint8Array([9]));
        expect(Buffer.from(await s.read("big")).equals(data)).toBe(true);
        expect(await s.stat("small")).toMatchObject({ size: 1 });
        expect(await paths(s)).toEqual(["big", "small"]);
        await s.delete("small");
        expect(await paths(s)).toEqual(["big"]);
        expect(server.proxy.faults("status")).toHaveLength(8);
      });

      it("never retries a 403 storm: permission_denied at once, for core's load too", async () => {
        const url = server.url("denied");
        const options = {
          checkpointId: url,
          storageOptions: server.storageOptions({ progressTimeoutMs: PROGRESS_MS }),
        };
        await save(stateDict(), options);
        server.proxy.requests.length = 0;
        server.proxy.addRule({
          match: s3Operation.getObject,
          times: Infinity,
          action: { kind: "status", status: 403, body: s3ErrorBody("AccessDenied", "Access Denied") },
        });
        const error = await rejection(load(options));
        expect(error.code).toBe("permission_denied");
        expect(error.message).toMatch(
          /^\[s3\] reading s3:\/\/cairn-test\/denied-[^ ]+\/metadata\.json was refused: AccessDenied: Access Denied, HTTP 403/,
        );
        expect(error.cause).toMatchObject({ name: "AccessDenied", $metadata: { httpStatusCode: 403 } });
        expect(server.proxy.requests.filter(s3Operation.getObject)).toHaveLength(1);
      });

      it("names a bucket that does not exist, as not_found", async () => {
        storage = await openStorage(
          "s3://no-such-bucket-cairn/run",
          server.storageOptions({ progressTimeoutMs: PROGRESS_MS }),
        );
        const error = await rejection(storage.write("x", new Uint8Array(1)));
        expect(error.code).toBe("not_found");
        expect(error.message).toMatch(/bucket no-such-bucket-cairn does not exist .*create it or fix the URL$/);
        await expect(storage.delete("x")).rejects.toMatchObject({ code: "not_found" });
      });
    });

    it(
      "saves and loads checkpoints bit-exact while every fourth request meets a fault of each kind in turn",
      { timeout: 120_000 },
      async () => {
        const storageOptions = server.storageOptions({
          progressTimeoutMs: PROGRESS_MS,
          retry: { baseDelayMs: 1, maxDelayMs: 20, maxAttempts: 8 },
        });
        const faults: FaultAction[] = [
          { kind: "status", status: 503, body: s3ErrorBody("SlowDown", "Please reduce your request rate.") },
          { kind: "lose" },
          { kind: "reset", phase: "response", afterBytes: 100 },
          { kind: "stall", phase: "response", afterBytes: 100 },
          { kind: "status", status: 500, body: s3ErrorBody("InternalError", "We encountered an internal error.") },
          { kind: "reset", phase: "request", afterBytes: 64 * 1024 },
        ];
        // The first rule sees every request and picks which rule, if any, takes it.
        let requests = 0;
        let chosen = -1;
        for (const [i, action] of faults.entries()) {
          server.proxy.addRule({
            times: Infinity,
            action,
            match: () => {
              if (i === 0) chosen = ++requests % 4 === 0 ? (requests / 4) % faults.length : -1;
              return chosen === i;
            },
          });
        }
        for (const step of [1, 2]) {
          const options = { checkpointId: `${server.url("chaos")}/${step}`, storageOptions };
          const state = stateDict();
          await save(state, options);
          const back = (await load(options)) as { model: Record<string, HostTensor>; rng: Uint8Array; step: number };
          const model = state.model as Record<string, HostTensor>;
          expect(bytesOf(back.model.weights).equals(bytesOf(model.weights))).toBe(true);
          expect(bytesOf(back.model.bias).equals(bytesOf(model.bias))).toBe(true);
          expect(Buffer.from(back.rng).equals(Buffer.from(state.rng as Uint8Array))).toBe(true);
          expect(back.step).toBe(7);
        }
        expect(server.proxy.faults().map((f) => f.fault)).toEqual(
          expect.arrayContaining(["status", "lose", "reset", "stall"]),
        );
      },
    );
  });
}
