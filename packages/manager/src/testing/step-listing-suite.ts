import { type StateDict, type StorageOptions, hostTensor } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";

export interface StepListingOptions {
  /** A fresh, empty root URL for each test. */
  readonly url: () => string;
  readonly storageOptions?: () => StorageOptions;
  /** How many LIST requests the storage server has answered so far (counted by the test server's proxy). */
  readonly listRequests: () => number;
  /** Objects one LIST request returns at most (1,000 on S3 and GCS). */
  readonly pageSize?: number;
  readonly timeoutMs?: number;
}

function state(step: number): StateDict {
  return { w: hostTensor("float32", [16], new Float32Array(16).fill(step)), step };
}

/**
 * What a manager costs in LIST requests on an object store: a new process lists a root of many
 * steps once (one request per page), then its saves and retention passes list nothing, however
 * many there are. A storage package runs it against its real test server.
 */
export function stepListingSuite(name: string, options: StepListingOptions): void {
  const storageOptions = (): StorageOptions | undefined => options.storageOptions?.();
  describe(name, { timeout: options.timeoutMs ?? 120_000 }, () => {
    it("a new manager lists a root of many steps in a bounded number of LIST requests, and saving and retention add none", async () => {
      const url = options.url();
      const writer = new CheckpointManager(url, 1, { storageOptions: storageOptions(), checkpointOnPreemption: false });
      const held = 40;
      for (let step = 0; step < held; step++) await writer.save(step, state(step));
      await writer.close();

      const before = options.listRequests();
      const mgr = new CheckpointManager(url, 1, {
        storageOptions: storageOptions(),
        maxToKeep: 3,
        checkpointOnPreemption: false,
      });
      expect(await mgr.latestStep()).toBe(held - 1);
      const opening = options.listRequests() - before;
      // Each step is a data file and metadata.json.
      expect(opening).toBeGreaterThanOrEqual(1);
      expect(opening).toBeLessThanOrEqual(Math.ceil((2 * held) / (options.pageSize ?? 1000)));
      for (let step = held; step < held + 10; step++) {
        await mgr.save(step, state(step));
        await mgr.join();
        expect(options.listRequests() - before).toBe(opening);
      }
      expect(await mgr.close()).toEqual({ retentionFailures: [] });
      expect(options.listRequests() - before).toBe(opening);

      const after = new CheckpointManager(url, 1, { storageOptions: storageOptions(), readOnly: true });
      expect(await after.allSteps()).toEqual([held + 7, held + 8, held + 9]);
      await after.close();
    });
  });
}
