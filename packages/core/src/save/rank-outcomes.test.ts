import { describe, expect, it } from "vitest";
import type { CheckpointError } from "../errors.js";
import { isCheckpointError } from "../errors.js";
import type { ProcessGroup } from "../process-group.js";
import { hostTensor } from "../state/tensors.js";
import { MapStorage } from "../../test/map-storage.js";
import { FaultyStorageAdapter } from "../testing/faulty-storage-adapter.js";
import { save } from "./save.js";

/**
 * Rank 0 of two, where rank 1 mirrors rank 0's local plan and then reports `outcome` for its
 * files: what a broken or hostile peer could send.
 */
function peerSending(outcome: unknown): ProcessGroup {
  let gathers = 0;
  return {
    rank: 0,
    worldSize: 2,
    allGather: async <T>(value: T) =>
      (gathers++ === 0 ? [value, { ...(value as object), rank: 1 }] : [value, outcome]) as T[],
    broadcast: async <T>(value: T | undefined) => value as T,
    barrier: async () => {},
  };
}

describe("save across ranks", () => {
  it.each([
    [{ ok: 1 }, "process_group", "no reason given"],
    [{ ok: false, code: "__proto__", message: "odd" }, "process_group", "odd"],
    [null, "process_group", "no reason given"],
    [{ ok: false, code: "no_space", message: "disk full" }, "no_space", "disk full"],
  ])("commits nothing when the other rank reports %j, and says which rank failed", async (outcome, code, message) => {
    const storage = new MapStorage();
    const state = { w: hostTensor("float32", [2], new Float32Array([1, 2])) };
    const error = await save(state, { storage, path: "ckpt", processGroup: peerSending(outcome) }).catch(
      (e: unknown) => e,
    );
    expect(isCheckpointError(error, code as CheckpointError["code"])).toBe(true);
    expect((error as CheckpointError).message).toContain(`rank 1 failed: ${message}`);
    expect((error as CheckpointError).context.rank).toBe(1);
    expect([...storage.objects.keys()]).toEqual([]);
  });

  it("keeps this rank's own failure as the cause, and another rank's failure without one", async () => {
    const state = { w: hostTensor("float32", [2], new Float32Array([1, 2])) };
    for (const metadata of [false, true]) {
      // The write of a data file fails, or the commit's write of metadata.json.
      const path = (p: string): boolean => p.endsWith("/metadata.json") === metadata;
      const storage = new FaultyStorageAdapter(new MapStorage(), [{ operation: "write", path, errno: "EROFS" }]);
      const error = (await save(state, { storage, path: "ckpt" }).catch((e: unknown) => e)) as CheckpointError;
      expect(error).toMatchObject({ code: "permission_denied", cause: { code: "permission_denied" } });
      expect((error.cause as CheckpointError).cause).toMatchObject({ code: "EROFS" });
    }
    const theirs = { ok: false, code: "no_space", message: "disk full" };
    const error = (await save(state, {
      storage: new MapStorage(),
      path: "ckpt",
      processGroup: peerSending(theirs),
    }).catch((e: unknown) => e)) as CheckpointError;
    expect(error.cause).toBeUndefined();
  });
});
