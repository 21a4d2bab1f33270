import { CheckpointError, type CheckpointMetadata, hostTensor, openStorage, readMetadata, save } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { StaleCheck } from "../src/durability/stale-check.js";
import { ManagerEmitter } from "../src/events/manager-events.js";

/** `metadata` as a load's lazily decoded metadata whose first chunk's checksums are forged: reading them throws. */
function forgedChunk(metadata: CheckpointMetadata): CheckpointMetadata {
  const entries = metadata.entries.map((entry, i) => {
    if (i > 0 || entry.kind === "value") return entry;
    const [first, ...rest] = entry.chunks;
    const { hash: _, ...plain } = first!;
    const chunk = Object.defineProperty({ ...plain }, "crc32c", {
      get: () => {
        throw new CheckpointError("corrupt", "forged block checksums");
      },
    });
    return { ...entry, chunks: [chunk, ...rest] };
  });
  return { ...metadata, entries } as CheckpointMetadata;
}

describe("StaleCheck", () => {
  it("metadata in hand whose unread checksums are forged stops no later comparison", async () => {
    const storage = await openStorage(`memory://stale-check/${process.pid}`);
    const state = { w: hostTensor("float32", [256], new Float32Array(256).fill(1)) };
    for (const step of [1, 2, 3]) await save(state, { storage, path: String(step) });
    const events = new ManagerEmitter();
    const seen: number[][] = [];
    events.on("stale", (s) => seen.push([s.step, s.sameAs]));
    const check = new StaleCheck(events);

    check.restored(1, forgedChunk(await readMetadata({ storage, path: "1" })));
    await expect(check.settled()).resolves.toBeUndefined();
    // Nothing to compare step 2 with (step 1's fingerprint could not be read); step 3 with step 2.
    check.committed(2, storage);
    check.committed(3, storage);
    await check.settled();
    expect(seen).toEqual([[3, 2]]);
  });
});
