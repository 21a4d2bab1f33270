import { CheckpointError, openStorage } from "@cairn/core";
import { storageContractSuite } from "@cairn/core/testing";
import { managerRunSuite, tieredRunSuite } from "@cairn/manager/testing";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import {
  type S3ServerKind,
  type S3TestServer,
  s3ErrorBody,
  s3Operation,
  startS3TestServer,
} from "./testing/s3-test-server.js";
import { S3StorageAdapter } from "./s3-storage-adapter.js";
import "./index.js";

const MiB = 1 << 20;

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
    storageContractSuite(`s3:// on ${kind}`, {
      open: () => openStorage(server.url("contract"), server.storageOptions()),
      // Listing past S3's 1,000-key page is checked once, on s3rver, the faster of the two emulators.
      ...(kind === "fauxqs" ? { listCount: 230 } : {}),
    });
    managerRunSuite(`s3:// on ${kind}`, {
      url: () => server.url("manager"),
      storageOptions: () => server.storageOptions(),
    });
    tieredRunSuite(`s3:// on ${kind}`, {
      url: () => server.url("tiered"),
      storageOptions: () => server.storageOptions(),
      outage: {
        start: () =>
          server.proxy.addRule({
            times: Infinity,
            action: { kind: "status", status: 503, body: s3ErrorBody("SlowDown", "Please reduce your request rate.") },
          }),
        end: () => server.proxy.clearRules(),
      },
    });

    describe("s3:// specifics", { timeout: 60_000 }, () => {
      it("reads a large range as concurrent part-sized GETs, bit-exact", async () => {
        const storage = await openStorage(server.url("ranges"), server.storageOptions());
        const data = new Uint8Array(17 * MiB + 5).map((_, i) => (i * 7919) & 0xff);
        await storage.write("blob", data);
        server.proxy.requests.length = 0;
        const part = await storage.read("blob", { offset: 3, length: 16 * MiB });
        expect(Buffer.from(part).equals(Buffer.from(data.subarray(3, 3 + 16 * MiB)))).toBe(true);
        // 16 MiB in 5 MiB parts: four GETs.
        expect(server.proxy.requests.filter(s3Operation.getObject)).toHaveLength(4);
        await storage.close();
      });

      it("carries ReadOptions.head in the first GET of a split read, at no extra GET", async () => {
        const storage = await openStorage(server.url("head"), server.storageOptions());
        const data = new Uint8Array(16 * MiB).map((_, i) => (i * 7919) & 0xff);
        await storage.write("blob", data);
        const head = new Uint8Array(MiB);
        server.proxy.requests.length = 0;
        const body = await storage.read("blob", { offset: 0, length: 16 * MiB }, { head });
        expect(Buffer.from(head).equals(data.subarray(0, MiB))).toBe(true);
        expect(Buffer.from(body).equals(data.subarray(MiB))).toBe(true);
        // 6 MiB (head and a 5 MiB part), then two 5 MiB parts: three GETs, as for 15 MiB without a head.
        expect(server.proxy.requests.filter(s3Operation.getObject)).toHaveLength(3);
        await storage.close();
      });

      it("deletes many objects in batches of 1,000 with DeleteObjects; missing ones are fine", async () => {
        const storage = await openStorage(server.url("many"), server.storageOptions());
        expect(storage).toBeInstanceOf(S3StorageAdapter);
        // 20 objects that exist around 981 that never did: 1,001 keys, two requests.
        const paths = Array.from({ length: 20 }, (_, i) => `step/${i}`);
        await Promise.all(paths.map((p) => storage.write(p, new Uint8Array([1]))));
        const missing = Array.from({ length: 981 }, (_, i) => `never/${i}`);
        server.proxy.requests.length = 0;
        await (storage as S3StorageAdapter).deleteMany([...paths.slice(0, 10), ...missing, ...paths.slice(10)]);
        expect(server.proxy.requests.filter((r) => r.method === "POST" && r.url.includes("delete"))).toHaveLength(2);
        const left: string[] = [];
        for await (const o of storage.list("")) left.push(o.path);
        expect(left).toEqual([]);
        await storage.close();
      });
    });
  });
}

describe("s3:// URLs and options", () => {
  it("roots the adapter at bucket and prefix, and never at a URL with credentials in it", async () => {
    const storage = await openStorage("s3://my-bucket/runs/exp%201/", {
      s3: { region: "us-east-1", credentials: { accessKeyId: "x", secretAccessKey: "y" } },
    });
    expect(storage.root).toBe("s3://my-bucket/runs/exp 1/");
    await storage.close();
    await expect(openStorage("s3://key:secret@my-bucket/runs")).rejects.toThrow(/credentials do not belong in the URL/);
    await expect(openStorage("s3://my-bucket/a", { s3: { partSize: MiB } })).rejects.toThrow(/at least 5 MiB/);
  });

  describe("with no AWS settings anywhere", () => {
    beforeAll(() => {
      for (const name of [
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
      ]) {
        vi.stubEnv(name, undefined);
      }
      vi.stubEnv("AWS_CONFIG_FILE", "/nonexistent/cairn-test/config");
      vi.stubEnv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/cairn-test/credentials");
      vi.stubEnv("AWS_EC2_METADATA_DISABLED", "true");
    });
    afterAll(() => {
      vi.unstubAllEnvs();
    });

    it("a missing region is invalid_argument naming the option and the variable to set", async () => {
      const storage = await openStorage("s3://my-bucket/run", {
        s3: { credentials: { accessKeyId: "x", secretAccessKey: "y" } },
      });
      const error = await storage.read("metadata.json").catch((e: unknown) => e);
      expect(error).toMatchObject({
        code: "invalid_argument",
        message: expect.stringMatching(
          /^\[s3\] reading s3:\/\/my-bucket\/run\/metadata\.json: no AWS region is configured; set storageOptions\.s3\.region, or AWS_REGION/,
        ),
      });
      expect((error as CheckpointError).cause).toBeInstanceOf(Error);
      await storage.close();
    });

    it("missing credentials are permission_denied naming the variables and the option to set", async () => {
      const storage = await openStorage("s3://my-bucket/run", {
        s3: { region: "us-east-1", endpoint: "http://127.0.0.1:9" },
      });
      const error = await storage.write("x", new Uint8Array(1)).catch((e: unknown) => e);
      expect(error).toMatchObject({
        code: "permission_denied",
        message: expect.stringMatching(
          /AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or pass storageOptions\.s3\.credentials$/,
        ),
      });
      expect((error as CheckpointError).cause).toMatchObject({ name: "CredentialsProviderError" });
      await storage.close();
    });
  });

  it("does not close a client it was given", async () => {
    const { S3Client } = await import("@aws-sdk/client-s3");
    const client = new S3Client({ region: "us-east-1", credentials: { accessKeyId: "x", secretAccessKey: "y" } });
    let destroyed = false;
    client.destroy = () => {
      destroyed = true;
    };
    const storage = await openStorage("s3://b/p", { s3: { client } });
    await storage.close();
    expect(destroyed).toBe(false);
    await expect(storage.read("x")).rejects.toBeInstanceOf(CheckpointError);
  });
});
