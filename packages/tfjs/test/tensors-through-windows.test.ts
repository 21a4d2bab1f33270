import * as tf from "@tensorflow/tfjs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type HostTensor, hostTensor, load, readMetadata, save } from "@cairn/core";
import { blockChecksums, loadXxh128 } from "@cairn/core/format";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const root = await mkdtemp(join(tmpdir(), "cairn-tfjs-windows-"));
afterAll(() => rm(root, { recursive: true, force: true }));
beforeAll(async () => {
  await tf.setBackend("cpu");
});

describe("tfjs tensors saved to file:// through windows", () => {
  it("big ones split across windows (float32 and int32), empty and tiny ones: their own checksums, loaded back bit-exact", async () => {
    const url = `file://${root}/t/1`;
    const shapes = [[3, 700_001], [0], [7], [5, 0], [300, 301], [1], [2_200_001]];
    const sd: Record<string, tf.Tensor> = {};
    shapes.forEach((shape, i) => {
      sd[`t${i}`] = tf.randomUniform(shape, -1000, 1000, i % 2 ? "float32" : "int32", i + 1);
    });
    await save(sd, url);
    const bytes = (t: tf.Tensor): Uint8Array => {
      const data = t.dataSync() as Float32Array | Int32Array;
      return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    };
    const xxh = await loadXxh128();
    const metadata = await readMetadata(url);
    for (const entry of metadata.entries) {
      if (entry.kind !== "tensor") continue;
      const want = bytes(sd[entry.key.join(".")]!);
      const [chunk] = entry.chunks;
      expect(chunk!.crc32c, entry.key.join(".")).toEqual(blockChecksums(want, chunk!.blockSize));
      expect(chunk!.hash, entry.key.join(".")).toBe(xxh.hash(want));
    }
    const target: Record<string, HostTensor> = {};
    for (const [key, t] of Object.entries(sd)) target[key] = hostTensor(t.dtype as "float32" | "int32", t.shape);
    await load(target, url);
    for (const [key, t] of Object.entries(sd)) {
      const got = target[key]!.data;
      expect(Buffer.compare(new Uint8Array(got.buffer, got.byteOffset, got.byteLength), bytes(t)), key).toBe(0);
    }
    tf.dispose(Object.values(sd));
  }, 120_000);
});
