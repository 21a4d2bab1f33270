import { randomBytes } from "node:crypto";
import { CheckpointError, type HostTensor, type StateDict, hostTensor, load, readMetadata, save } from "@cairn/core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import "../src/index.js";
import {
  type S3TestServer,
  s3ErrorBody,
  s3Operation,
  startS3TestServer,
  uploadIdSeen,
} from "../src/testing/s3-test-server.js";
import { UploadPartCommand } from "@aws-sdk/client-s3";

const MiB = 1 << 20;

/** A state dict whose biggest tensor (12 MiB) goes up as a multipart upload of 5 MiB parts. */
function stateDict(): StateDict {
  const weights = new Float32Array(3 * MiB);
  for (let i = 0; i < weights.length; i++) weights[i] = Math.sin(i) * 1e3;
  return {
    model: {
      weights: hostTensor("float32", [3 * 1024, 1024], weights),
      bias: hostTensor("float64", [7], Float64Array.from([1, 2, 3, 4, 5, 6, 7])),
    },
    optimizer: { step: 1200, lr: 3e-4, rng: new Uint8Array(randomBytes(4096)) },
    "key.with/dots": hostTensor("int64", [2], BigInt64Array.from([-1n, 2n ** 62n])),
  };
}

async function objectsUnder(server: S3TestServer, url: string): Promise<string[]> {
  const { openStorage } = await import("@cairn/core");
  const storage = await openStorage(url, server.storageOptions());
  const paths: string[] = [];
  for await (const o of storage.list("")) paths.push(o.path);
  await storage.close();
  return paths.sort();
}

function bytesOf(tensor: unknown): Buffer {
  const t = tensor as HostTensor;
  return Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
}

for (const kind of ["s3rver", "fauxqs"] as const) {
  describe(`save and load through s3:// on ${kind}`, { timeout: 60_000 }, () => {
    let server: S3TestServer;
    beforeAll(async () => {
      server = await startS3TestServer(kind);
    });
    afterAll(async () => {
      await server?.stop();
    });
    afterEach(() => {
      server.proxy.clearRules();
      server.proxy.requests.length = 0;
    });

    it("round-trips a checkpoint bit-exactly, the large file as a multipart upload", async () => {
      const url = server.url("roundtrip");
      const original = stateDict();
      const saved = await save(original, {
        checkpointId: url,
        storageOptions: server.storageOptions(),
        metadata: { step: 1200 },
      });
      expect(saved.bytes).toBeGreaterThan(12 * MiB);
      expect(server.proxy.requests.filter(s3Operation.uploadPart).length).toBeGreaterThanOrEqual(3);
      expect((await readMetadata({ checkpointId: url, storageOptions: server.storageOptions() })).user).toMatchObject({
        step: 1200,
      });

      const back = (await load({ checkpointId: url, storageOptions: server.storageOptions() })) as Record<
        string,
        Record<string, unknown>
      >;
      const model = original.model as Record<string, HostTensor>;
      expect(bytesOf(back.model!.weights).equals(bytesOf(model.weights))).toBe(true);
      expect(bytesOf(back.model!.bias).equals(bytesOf(model.bias))).toBe(true);
      expect(bytesOf(back["key.with/dots"]).equals(bytesOf(original["key.with/dots"]))).toBe(true);
      expect(back.optimizer).toMatchObject({ step: 1200, lr: 3e-4 });
      expect(
        Buffer.from(back.optimizer!.rng as Uint8Array).equals(
          Buffer.from((original.optimizer as { rng: Uint8Array }).rng),
        ),
      ).toBe(true);

      const target = { model: { weights: hostTensor("float32", [3 * 1024, 1024]), bias: hostTensor("float64", [7]) } };
      await load(target, { checkpointId: url, storageOptions: server.storageOptions() });
      expect(bytesOf(target.model.weights).equals(bytesOf(model.weights))).toBe(true);
    });

    it("loads with no HEAD: each data file's size comes from its ranged GETs, and a wrong size is corrupt", async () => {
      const url = server.url("sizes");
      const original = stateDict();
      await save(original, { checkpointId: url, storageOptions: server.storageOptions() });
      server.proxy.requests.length = 0;
      const target = { model: { weights: hostTensor("float32", [3 * 1024, 1024]), bias: hostTensor("float64", [7]) } };
      await load(target, { checkpointId: url, storageOptions: server.storageOptions() });
      expect(
        bytesOf(target.model.weights).equals(bytesOf((original.model as Record<string, HostTensor>).weights)),
      ).toBe(true);
      expect(server.proxy.requests.filter(s3Operation.getObject).length).toBeGreaterThan(1);
      expect(server.proxy.requests.filter(s3Operation.headObject)).toEqual([]);

      // One byte appended: every range still reads and verifies; only the size tells.
      const { openStorage } = await import("@cairn/core");
      const storage = await openStorage(url, server.storageOptions());
      const metadata = await readMetadata({ storage, path: "" });
      const file = Object.keys(metadata.files)[0]!;
      const bytes = await storage.read(file);
      const extended = new Uint8Array(bytes.byteLength + 1);
      extended.set(bytes);
      await storage.write(file, extended);
      server.proxy.requests.length = 0;
      await expect(load({ checkpointId: url, storageOptions: server.storageOptions() })).rejects.toMatchObject({
        code: "corrupt",
        message: expect.stringMatching(/truncated or extended/),
      });
      expect(server.proxy.requests.filter(s3Operation.headObject)).toEqual([]);
      await storage.write(file, bytes.subarray(0, bytes.byteLength - 1));
      await expect(load({ checkpointId: url, storageOptions: server.storageOptions() })).rejects.toMatchObject({
        code: "corrupt",
      });
      await storage.close();
    });

    it("commits despite 503 SlowDown, 500, a reset mid-body and a stall", async () => {
      const url = server.url("transient");
      const { proxy } = server;
      proxy.addRule({
        match: s3Operation.part(1),
        action: { kind: "status", status: 503, body: s3ErrorBody("SlowDown", "Please reduce your request rate.") },
      });
      proxy.addRule({ match: s3Operation.part(2), action: { kind: "reset", phase: "request", afterBytes: MiB } });
      proxy.addRule({
        match: s3Operation.putObject,
        action: {
          kind: "status",
          status: 500,
          body: s3ErrorBody("InternalError", "We encountered an internal error."),
        },
      });
      proxy.addRule({ match: s3Operation.completeMultipartUpload, action: { kind: "delay", ms: 1_500 } });
      const options = { checkpointId: url, storageOptions: server.storageOptions({ progressTimeoutMs: 1_000 }) };
      await save(stateDict(), options);
      expect(
        proxy
          .faults()
          .map((f) => f.fault)
          .sort(),
      ).toEqual(["delay", "reset", "status", "status"]);
      // The stalled CompleteMultipartUpload timed out and was sent again.
      expect(proxy.requests.filter(s3Operation.completeMultipartUpload).length).toBeGreaterThanOrEqual(2);
      expect((await objectsUnder(server, url)).includes("metadata.json")).toBe(true);
      await expect(readMetadata(options)).resolves.toMatchObject({ format: expect.anything() });
    });

    it("rejects a permanent 403 as permission_denied, commits nothing and leaves no upload open", async () => {
      const url = server.url("denied");
      server.proxy.addRule({
        match: s3Operation.uploadPart,
        times: Infinity,
        action: { kind: "status", status: 403, body: s3ErrorBody("AccessDenied", "Access Denied") },
      });
      const error = await save(stateDict(), { checkpointId: url, storageOptions: server.storageOptions() }).then(
        () => undefined,
        (e: unknown) => e as CheckpointError,
      );
      expect(error).toBeInstanceOf(CheckpointError);
      expect(error!.code).toBe("permission_denied");
      expect(error!.message).toMatch(
        /\[s3\] uploading part \d+ of s3:\/\/cairn-test\/denied-[^ ]+ was refused: AccessDenied/,
      );
      // One attempt per part: a 403 is not retried, by the adapter or by core.
      expect(server.proxy.faults("status").length).toBeLessThanOrEqual(3);
      expect(await objectsUnder(server, url)).toEqual([]);
      expect(server.proxy.requests.filter(s3Operation.abortMultipartUpload)).toHaveLength(1);
      if (kind === "fauxqs") {
        const key = server.proxy.requests
          .find(s3Operation.uploadPart)!
          .url.split("?")[0]!
          .slice(`/${server.bucket}/`.length);
        const part = server.client.send(
          new UploadPartCommand({
            Bucket: server.bucket,
            Key: decodeURIComponent(key),
            UploadId: uploadIdSeen(server.proxy.requests),
            PartNumber: 9,
            Body: new Uint8Array(1),
          }),
        );
        await expect(part).rejects.toMatchObject({ name: "NoSuchUpload" });
      }
      // s3rver 3.7.1 answers AbortMultipartUpload with 405: its parts stay; only the request can be checked.
    });

    it("lets one of two racing saves commit; the other gets already_exists from the 412", async () => {
      const url = server.url("race");
      const options = { checkpointId: url, storageOptions: server.storageOptions() };
      const results = await Promise.allSettled([save(stateDict(), options), save(stateDict(), options)]);
      expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
      const lost = results.find((r): r is PromiseRejectedResult => r.status === "rejected")!;
      expect((lost.reason as CheckpointError).code).toBe("already_exists");
      expect(server.proxy.faults("precondition").length).toBeGreaterThanOrEqual(1);
      // The loser removed its data files; only the winner's files and metadata.json remain.
      const metadata = await readMetadata(options);
      expect((await objectsUnder(server, url)).sort()).toEqual(
        ["metadata.json", ...Object.keys(metadata.files)].sort(),
      );
    });
  });
}
