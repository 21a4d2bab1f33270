import { type HostTensor, hostTensor, load, readMetadata } from "@cairn/core";
import { deleteCheckpoint } from "@cairn/core/ops";
import { CheckpointManager, StepStore } from "@cairn/manager";
import { PowerLossFs, powerLossStorage } from "@cairn/storage-local/testing";
import { describe, expect, it } from "vitest";

/** Tensor i changes every i + 1 steps: step 5 references step 3's file, step 7 step 5's and not step 3's. */
function stateOf(step: number): Record<string, HostTensor> {
  const state: Record<string, HostTensor> = {};
  for (let i = 0; i < 4; i++)
    state[`t${i}`] = hostTensor("float32", [1024], new Float32Array(1024).fill(i * 1000 + Math.floor(step / (i + 1))));
  return state;
}

describe("cairn rm of checkpoints under power loss (deleteCheckpoint)", () => {
  it("a removed checkpoint never comes back without the files of another it used", async () => {
    const fs = new PowerLossFs(() => undefined);
    const storage = powerLossStorage(fs);
    const save = async (steps: number[], incremental: boolean): Promise<void> => {
      const manager = new CheckpointManager(storage, 1, { incremental, checkpointOnPreemption: false });
      for (const step of steps) await manager.save(step, stateOf(step), { force: true });
      await manager.close();
    };
    await save([3, 5, 7], true);
    for (const step of [5, 3])
      await deleteCheckpoint(storage, String(step), await readMetadata({ storage, path: String(step) }));
    await save([9], false); // A new directory: the root is fsynced, so step 3's directory is durably gone.
    const after = powerLossStorage(fs.recovered());
    for (const step of await new StepStore(after).committedSteps()) {
      const back = await load({ storage: after, path: String(step) }).catch((error: unknown) => error);
      expect(back instanceof Error ? `step ${step}: ${back.message}` : "loads").toBe("loads");
    }
  });
});
