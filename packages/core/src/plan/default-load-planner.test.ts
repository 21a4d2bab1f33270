import { describe, expect, it } from "vitest";
import { seededRandom } from "../testing/seeded-random.js";
import type { CheckpointMetadata, ChunkMetadata, EntryMetadata, TensorEntry } from "../format/metadata.js";
import { type KeyPath, pathId } from "../state/state-dict.js";
import { DefaultLoadPlanner } from "./default-load-planner.js";
import type { LoadRequest } from "./load-planner.js";

function entry(key: KeyPath, length: number, file: string): EntryMetadata {
  const chunk: ChunkMetadata = {
    offsets: [0],
    sizes: [length],
    file,
    tensorName: pathId(key),
    byteOffset: 0,
    byteLength: length * 4,
    blockSize: 1024,
    crc32c: [0],
  };
  return { kind: "tensor", key, dtype: "float32", shape: [length], chunks: [chunk] };
}

function metadataOf(entries: EntryMetadata[]): CheckpointMetadata {
  return { entries } as unknown as CheckpointMetadata;
}

function request(e: EntryMetadata, key: KeyPath = e.key): LoadRequest {
  const shape = e.kind === "tensor" ? e.shape : [0];
  return { key, kind: "tensor", dtype: "float32", shape, box: { offsets: [0], sizes: shape } };
}

describe("DefaultLoadPlanner: matching requests to entries", () => {
  it("matches by key path whatever the order, subset or duplicates, as a lookup by key id does", () => {
    for (let seed = 1; seed <= 200; seed++) {
      const next = seededRandom(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)]!;
      // Keys that differ only by an index's type (0 against "0") or a segment's split ("a.b" against "a", "b").
      const keys: KeyPath[] = [
        ["w"],
        ["layers", 0, "w"],
        ["layers", "0", "w"],
        ["a.b"],
        ["a", "b"],
        ["layers", 1, "w"],
      ];
      const entries = keys.map((key, i) => entry(key, i + 1, `f${i}`));
      if (next() < 0.3) {
        // A later entry with the same key: a lookup by key id takes the last.
        const k = Math.floor(next() * keys.length);
        entries.push(entry(keys[k]!, k + 1, "dup"));
      }
      let asked = entries.slice(0, keys.length).map((e) => request(e));
      const shape = pick(["same", "shuffled", "subset"] as const);
      if (shape === "shuffled") asked = asked.sort(() => next() - 0.5);
      if (shape === "subset") asked = asked.filter(() => next() < 0.6);
      const byId = new Map(entries.map((e) => [pathId(e.key), e]));
      const planned = new DefaultLoadPlanner().createLoadPlan(metadataOf(entries), asked, { partial: false });
      const expected = asked.map((r) => (byId.get(pathId(r.key)) as TensorEntry).chunks[0]!.file);
      const got = asked.map((_, i) => planned.items.find((item) => item.request === i)?.chunk.file);
      expect(got, `seed ${seed} (${shape})`).toEqual(expected);
    }
  });

  it("refuses a key the checkpoint lacks even when every other key lines up in order", () => {
    const entries = [entry(["a"], 1, "f0"), entry(["layers", 0], 2, "f1")];
    const asked = [request(entries[0]!), request(entries[1]!, ["layers", "0"])];
    expect(() => new DefaultLoadPlanner().createLoadPlan(metadataOf(entries), asked, { partial: false })).toThrow(
      /layers\.0.*does not have it/,
    );
  });
});
