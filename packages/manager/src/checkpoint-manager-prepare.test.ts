import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type HostTensor, hostTensor } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { CheckpointManager } from "./checkpoint-manager.js";

describe("CheckpointManager.prepare", () => {
  it("readies staging so that saveAsync commits the state as it was when called", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-prepare-"));
    try {
      const weights = hostTensor("float32", [1 << 18], new Float32Array(1 << 18).fill(2));
      const manager = new CheckpointManager(`file://${dir}`, 1, { checkpointOnPreemption: false });
      const prepared = manager.prepare({ weights, step: 0 });
      // A saveAsync while it runs waits for it and then stages as usual.
      await manager.saveAsync(1, { weights, step: 1 });
      weights.data.fill(3);
      await prepared;
      await manager.saveAsync(2, { weights, step: 2 });
      await manager.join();
      const one = (await manager.restore(1)) as { weights: HostTensor<"float32">; step: number };
      const two = (await manager.restore(2)) as { weights: HostTensor<"float32">; step: number };
      expect([one.weights.data[0], one.weights.data.at(-1), one.step]).toEqual([2, 2, 1]);
      expect([two.weights.data[0], two.weights.data.at(-1), two.step]).toEqual([3, 3, 2]);
      await manager.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("is refused by a read-only manager and rejects a bad state dict", async () => {
    const readOnly = new CheckpointManager("memory://prepare-read-only", 1, {
      readOnly: true,
      checkpointOnPreemption: false,
    });
    await expect(readOnly.prepare({ t: hostTensor("float32", [4]) })).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining("read-only"),
    });
    const manager = new CheckpointManager("memory://prepare-bad", 1, { checkpointOnPreemption: false });
    await expect(manager.prepare(null as never)).rejects.toMatchObject({ code: "invalid_argument" });
    await manager.close();
    await readOnly.close();
  });
});
