import { describe, expect, it } from "vitest";
import { type CheckpointErrorCode, isCheckpointError } from "../errors.js";
import { METADATA_FILE } from "../format/metadata.js";
import { hostTensor } from "../state/tensors.js";
import { save } from "../save/save.js";
import { MapStorage } from "../../test/map-storage.js";
import { load } from "./load.js";
import { readMetadata } from "./read-metadata.js";

const state = () => ({
  w: hostTensor("float32", [3], Float32Array.of(1, 2, 3)),
  blob: Uint8Array.of(7, 8),
  step: 5,
});

/** A saved checkpoint at "ckpt" whose metadata.json is then taken away: only given metadata can load it. */
async function withoutMetadataFile() {
  const storage = new MapStorage();
  await save(state(), { storage, path: "ckpt" });
  const bytes = storage.objects.get(`ckpt/${METADATA_FILE}`)!;
  const metadata = await readMetadata({ storage, path: "ckpt" });
  const { bytesRead } = await load(state(), { storage, path: "ckpt" });
  storage.objects.delete(`ckpt/${METADATA_FILE}`);
  return { storage, bytes, metadata, bytesRead };
}

describe("load with the metadata given", () => {
  it("loads from the data files alone, given the bytes of metadata.json or the parsed metadata", async () => {
    const { storage, bytes, metadata, bytesRead } = await withoutMetadataFile();
    for (const given of [bytes, metadata]) {
      const target = { w: hostTensor("float32", [3]), blob: new Uint8Array(0), step: 0 };
      const result = await load(target, { storage, path: "ckpt", metadata: given });
      expect(target).toEqual(state());
      // What the load read is only data: the metadata came with the call.
      expect(result.bytesRead).toBe(bytesRead - bytes.byteLength);
      expect(await load({ storage, path: "ckpt", metadata: given })).toEqual(state());
    }
    await expect(load({ storage, path: "ckpt" })).rejects.toSatisfy((e) => isCheckpointError(e, "not_committed"));
  });

  it("checks what it is given as it checks what it reads", async () => {
    const { storage, bytes, metadata } = await withoutMetadataFile();
    const flipped = bytes.slice();
    flipped[bytes.length - 10] = flipped[bytes.length - 10]! ^ 1;
    const newer = new TextEncoder().encode(JSON.stringify({ format: metadata.format, version: "9.0" }));
    const cases: [unknown, CheckpointErrorCode][] = [
      [flipped, "corrupt"],
      [newer, "unsupported_version"],
      [{ ...metadata, version: "9.0" }, "unsupported_version"],
      [{ ...metadata, version: "two" }, "corrupt"],
      [{ ...metadata, entries: [{ kind: "tensor", key: ["w"] }] }, "corrupt"],
      [{ ...metadata, checksum: { algorithm: "md5", blockSize: 1 } }, "corrupt"],
      ["metadata.json", "invalid_argument"],
      [[bytes], "invalid_argument"],
    ];
    for (const [given, code] of cases) {
      const error = await load({ storage, path: "ckpt", metadata: given as Uint8Array }).catch((e: unknown) => e);
      expect(isCheckpointError(error, code), `${code}: ${String(error)}`).toBe(true);
    }
    await expect(load({ checkpointId: "hf+memory://x", metadata: bytes })).rejects.toSatisfy((e) =>
      isCheckpointError(e, "invalid_argument"),
    );
  });
});
