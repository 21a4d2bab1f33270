import { describe, expect, it } from "vitest";
import { isCheckpointError } from "../errors.js";
import { encodeChecksums } from "../format/checksum-blocks.js";
import { crc32c } from "../format/crc32c.js";
import { METADATA_FILE } from "../format/metadata.js";
import { hostTensor } from "../state/tensors.js";
import { save } from "../save/save.js";
import { MapStorage } from "../../test/map-storage.js";
import { load } from "./load.js";
import { readMetadata } from "./read-metadata.js";

// A load decodes the block checksums of the chunks it checks only (a rank's share): a forged
// string of them is refused when its chunk is read, before any byte is checked against it.

/** Rows of 1 KiB: 1 KiB checksum blocks, 64 sums a tensor. */
const tensor = (seed: number) =>
  hostTensor(
    "float32",
    [64, 256],
    new Float32Array(64 * 256).map((_, i) => i + seed),
  );

/** A checkpoint of `a` and `b` whose metadata.json has one character of `a`'s checksums forged, its own checksum made to match. */
async function forgedCheckpoint(): Promise<MapStorage> {
  const storage = new MapStorage();
  await save({ a: tensor(1), b: tensor(2) }, { storage, path: "ckpt" });
  const metadata = await readMetadata({ storage, path: "ckpt" });
  const a = metadata.entries.find((e) => e.key[0] === "a")!;
  const base64 = encodeChecksums(a.kind === "tensor" ? a.chunks[0]!.crc32c : []);
  expect(base64.length).toBeGreaterThan(64);
  const text = new TextDecoder().decode(storage.objects.get(`ckpt/${METADATA_FILE}`)!);
  const at = text.indexOf(`"${base64}"`) + 10;
  expect(at).toBeGreaterThan(10);
  // "-" is base64url, not base64: the string keeps its length, so only decoding it can tell.
  const body = `${text.slice(0, at)}-${text.slice(at + 1)}`.replace(/^\{"metadataCrc32c":\d+,/, "{");
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
});
