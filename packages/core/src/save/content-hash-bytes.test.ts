import { describe, expect, it } from "vitest";
import { parseMetadata } from "../format/metadata-json.js";
import { loadXxh128 } from "../format/xxh128.js";
import type { ProcessGroup } from "../process-group.js";
import { hostTensor } from "../state/tensors.js";
import { MapStorage } from "../../test/map-storage.js";
import { save } from "./save.js";

// A save keeps its chunks' content hashes as bytes (no hex string per chunk): the hashes must
// still reach metadata.json however the outcome travels.

/** Small tensors, so each file is packed through windows (whose hashes come as bytes). */
const state = {
  layers: Array.from({ length: 300 }, (_, i) => ({ w: hostTensor("float32", [64], new Float32Array(64).fill(i)) })),
};

async function savedHashes(storage: MapStorage): Promise<{ version: string; hashes: Map<string, string> }> {
  const metadata = parseMetadata(storage.objects.get("ckpt/metadata.json")!, "ckpt");
  const hashes = new Map<string, string>();
  for (const entry of metadata.entries)
    if (entry.kind !== "value") for (const chunk of entry.chunks) hashes.set(entry.key.join("."), chunk.hash!);
  return { version: metadata.version, hashes };
}

/** Every chunk in metadata.json has its tensor's XXH3-128; `count` chunks (this rank's, where rank 1 wrote nothing). */
async function expectEveryHash(storage: MapStorage, count = 300): Promise<void> {
  const xxh = await loadXxh128();
  const { version, hashes } = await savedHashes(storage);
  expect(version).toBe("2.2");
  expect(hashes.size).toBe(count);
  for (const [key, hash] of hashes) {
    const w = state.layers[Number(key.split(".")[1])]!.w;
    expect(hash, key).toBe(xxh.hash(new Uint8Array(w.data.buffer, w.data.byteOffset, w.data.byteLength)));
  }
}

describe("content hashes kept as bytes", () => {
  it("reach metadata.json in a save of one rank", async () => {
    const storage = new MapStorage();
    await save(state, { storage, path: "ckpt" });
    await expectEveryHash(storage);
  });

  it("reach metadata.json when the group hands back a copy of this rank's outcome", async () => {
    // As a group whose collectives cross a thread or a socket does: the copy has no bytes beside it.
    const copying: ProcessGroup = {
      rank: 0,
      worldSize: 1,
      allGather: async <T>(value: T) => [structuredClone(value)],
      broadcast: async <T>(value: T | undefined) => structuredClone(value) as T,
      barrier: async () => {},
    };
    const storage = new MapStorage();
    await save(state, { storage, path: "ckpt", processGroup: copying });
    await expectEveryHash(storage);
  });

  it("go to another rank as strings", async () => {
    const sent: unknown[] = [];
    let gathers = 0;
    // Rank 0 of two; rank 1 mirrors rank 0's plan and writes nothing.
    const group: ProcessGroup = {
      rank: 0,
      worldSize: 2,
      allGather: async <T>(value: T) => {
        sent.push(structuredClone(value));
        const other =
          gathers++ === 0 ? { ...(value as object), rank: 1 } : { ok: true, files: {}, chunks: [], bytes: 0 };
        return [value, other] as T[];
      },
      broadcast: async <T>(value: T | undefined) => value as T,
      barrier: async () => {},
    };
    const storage = new MapStorage();
    await save(state, { storage, path: "ckpt", processGroup: group });
    const outcome = sent[1] as { chunks: { chunk: { hash?: string } }[] };
    // The plan gave rank 0 half the tensors.
    expect(outcome.chunks).toHaveLength(150);
    for (const { chunk } of outcome.chunks) expect(chunk.hash).toMatch(/^[0-9a-f]{32}$/);
    await expectEveryHash(storage, 150);
  });
});
