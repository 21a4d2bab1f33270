import { describe, expect, it } from "vitest";
import { isCheckpointError } from "../errors.js";
import { encodeChecksums } from "../format/checksum-blocks.js";
import { crc32c } from "../format/crc32c.js";
import { METADATA_FILE } from "../format/metadata.js";
import { hostTensor } from "../state/tensors.js";
import { shardedTensor } from "../state/sharded-tensor.js";
import { save } from "../save/save.js";
import { MapStorage } from "../../test/map-storage.js";
import { load } from "./load.js";
import { readMetadata } from "./read-metadata.js";

// A load decodes the block checksums of the blocks it checks only (a rank's share): a forged
// string of them is refused when those blocks are read, before any byte is checked against it.

/** Rows of 1 KiB: 1 KiB checksum blocks, 64 sums a tensor. */
const tensor = (seed: number) =>
  hostTensor(
    "float32",
    [64, 256],
    new Float32Array(64 * 256).map((_, i) => i + seed),
  );

/** A checkpoint of `a` and `b` whose metadata.json has character `at` of `a`'s checksums (-1: the last but 4) forged, its own checksum made to match. */
async function forgedCheckpoint(at = 10): Promise<MapStorage> {
  const storage = new MapStorage();
  await save({ a: tensor(1), b: tensor(2) }, { storage, path: "ckpt" });
  const metadata = await readMetadata({ storage, path: "ckpt" });
  const a = metadata.entries.find((e) => e.key[0] === "a")!;
  const base64 = encodeChecksums(a.kind === "tensor" ? a.chunks[0]!.crc32c : []);
  expect(base64.length).toBeGreaterThan(64);
  const text = new TextDecoder().decode(storage.objects.get(`ckpt/${METADATA_FILE}`)!);
  const from = text.indexOf(`"${base64}"`) + 1;
  expect(from).toBeGreaterThan(0);
  const forgedAt = from + (at < 0 ? base64.length - 5 : at);
  // "-" is base64url, not base64: the string keeps its length, so only decoding it can tell.
  const body = `${text.slice(0, forgedAt)}-${text.slice(forgedAt + 1)}`.replace(/^\{"metadataCrc32c":\d+,/, "{");
  storage.objects.set(
    `ckpt/${METADATA_FILE}`,
    new TextEncoder().encode(`{"metadataCrc32c":${crc32c(new TextEncoder().encode(body))},${body.slice(1)}`),
  );
  return storage;
}

describe("a load's block checksums, decoded as its chunks are checked", () => {
  it("refuse a forged string of the chunk read, and leave the chunks not read undecoded", async () => {
    const storage = await forgedCheckpoint();
    const both = { a: hostTensor("float32", [64, 256]), b: hostTensor("float32", [64, 256]) };
    const error = await load(both, { storage, path: "ckpt" }).catch((e: unknown) => e);
    expect(isCheckpointError(error, "corrupt"), String(error)).toBe(true);
    expect(String(error)).toMatch(/entry a has a chunk whose checksums/);
    // `b` alone (another rank's share) loads: `a`'s sums are never decoded.
    const b = { b: hostTensor("float32", [64, 256]) };
    const result = await load(b, { storage, path: "ckpt" });
    expect(b.b.data).toEqual(tensor(2).data);
    // What the load returns refuses them when asked, as readMetadata does at once.
    const returned = result.metadata.entries.find((e) => e.key[0] === "a")!;
    expect(() => (returned.kind === "tensor" ? returned.chunks[0]!.crc32c : [])).toThrow(/checksums/);
    await expect(readMetadata({ storage, path: "ckpt" })).rejects.toSatisfy((e) => isCheckpointError(e, "corrupt"));
  });

  it("decode only the sums of the blocks a load checks: a forged character elsewhere in them is never read", async () => {
    const storage = await forgedCheckpoint(-1);
    // The first 32 of a's 64 rows: blocks 0..31, whose sums are the first half of the string.
    const half = hostTensor("float32", [32, 256]);
    await load(
      { a: shardedTensor("float32", [64, 256], [{ offsets: [0, 0], tensor: half }]) },
      { storage, path: "ckpt" },
    );
    expect(half.data).toEqual(tensor(1).data.subarray(0, 32 * 256));
    const rest = hostTensor("float32", [32, 256]);
    const error = await load(
      { a: shardedTensor("float32", [64, 256], [{ offsets: [32, 0], tensor: rest }]) },
      { storage, path: "ckpt" },
    ).catch((e: unknown) => e);
    expect(isCheckpointError(error, "corrupt"), String(error)).toBe(true);
  });
});
