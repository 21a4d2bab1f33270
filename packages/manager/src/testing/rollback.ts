import { type StateDict, openStorage } from "@cairn/core";
import { CheckpointManager } from "../checkpoint-manager.js";
import type { JoinResult } from "../tiers/tier-set.js";
import { FullOutageStorage } from "./outage-storage.js";

/**
 * Issue 32's rollback on two tiers: steps 1 and 2 saved and copied to `slow`; then, with `slow`
 * down, a restore of 1 and a new step 2 saved over the old (`overwrite`), and the manager closed
 * before the copy. `slow`'s step 2 is then the abandoned checkpoint, under the new step's number.
 */
export async function overwriteUncopiedStep(
  fast: string,
  slow: string,
  stateOf: (value: number) => StateDict,
): Promise<JoinResult> {
  const down = new FullOutageStorage(await openStorage(slow));
  const mgr = new CheckpointManager([fast, down], 1, {
    checkpointOnPreemption: false,
    replication: { retry: { baseDelayMs: 20, maxDelayMs: 100 } },
  });
  mgr.on("error", () => undefined);
  await mgr.save(1, stateOf(1));
  await mgr.save(2, stateOf(2));
  await mgr.join();
  down.down = true;
  await mgr.restore(1, stateOf(0));
  await mgr.save(2, stateOf(22), { overwrite: true });
  return mgr.close({ timeoutMs: 200 });
}
