import { hostTensor, load, save, shardedTensor } from "@cairn/core";
import { startGcsTestServer } from "@cairn/storage-gcs/testing";
import { startS3TestServer } from "@cairn/storage-s3/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cairnProcess, tempDir } from "./helpers.js";

// The real servers the storage packages test against: fauxqs (S3) and the GCS emulator.
let s3: Awaited<ReturnType<typeof startS3TestServer>>;
let gcs: Awaited<ReturnType<typeof startGcsTestServer>>;
beforeAll(async () => {
  [s3, gcs] = await Promise.all([startS3TestServer("fauxqs"), startGcsTestServer()]);
}, 120_000);
afterAll(async () => {
  await Promise.all([s3?.stop(), gcs?.stop()]);
});

describe("cairn cp between storages (spawned bin, real servers)", () => {
  it(
    "copies file:// → s3:// → gs:// → file://, each copy verified and committed, bit-exact at the end",
    { timeout: 180_000 },
    async () => {
      const options = JSON.stringify({ ...s3.storageOptions(), ...gcs.storageOptions });
      const source = `file://${await tempDir()}/ckpt`;
      const w = hostTensor("float32", [300, 40]);
      w.data.forEach((_, i) => (w.data[i] = Math.sin(i)));
      const shards = [0, 1, 2].map((r) => ({
        offsets: [r * 100, 0],
        tensor: hostTensor("float32", [100, 40], w.data.slice(r * 4000, (r + 1) * 4000)),
      }));
      await save({ w: shardedTensor("float32", [300, 40], shards), step: 7, blob: new Uint8Array([1, 2, 3]) }, source);

      const inS3 = s3.url("cp");
      const inGcs = gcs.location("cp");
      const back = `file://${await tempDir()}/back`;
      for (const [from, to] of [
        [source, inS3],
        [inS3, inGcs],
        [inGcs, back],
      ] as const) {
        const copied = await cairnProcess(["cp", from, to, "--storage-options", options]);
        expect(copied.code, copied.stderr).toBe(0);
        const verified = await cairnProcess(["verify", to, "--json", "--storage-options", options]);
        expect(verified.code, verified.stderr).toBe(0);
        expect(JSON.parse(verified.stdout)).toMatchObject({ ok: true });
      }
      const copy = (await load(back)) as unknown as { w: { data: Float32Array }; step: number; blob: Uint8Array };
      expect(Buffer.from(copy.w.data.buffer).equals(Buffer.from(w.data.buffer))).toBe(true);
      expect([copy.step, [...copy.blob]]).toEqual([7, [1, 2, 3]]);
      // Copying onto a committed checkpoint is refused, and leaves it as it was.
      const again = await cairnProcess(["cp", source, inGcs, "--storage-options", options]);
      expect(again.code).not.toBe(0);
      expect(again.stderr).toMatch(/already/);
    },
  );
});
