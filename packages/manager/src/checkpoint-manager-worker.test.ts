import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as core from "@cairn/core";
import { hostTensor } from "@cairn/core";
import { afterEach, describe, expect, it, vi } from "vitest";
import { CheckpointManager } from "./checkpoint-manager.js";

vi.mock("@cairn/core", async (original) => ({
  ...(await original<typeof core>()),
  startUploadWorker: vi.fn(),
}));

const started = vi.mocked(core.startUploadWorker);
afterEach(() => started.mockClear());

describe("CheckpointManager: when the upload worker starts loading", () => {
  it("not while a restarted job restores, but at its first step after it", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-worker-start-"));
    try {
      const t = hostTensor("float32", [1024], new Float32Array(1024).fill(1));
      const writer = new CheckpointManager(`file://${dir}`, 1, { checkpointOnPreemption: false, uploadWorker: false });
      await writer.save(1, { t });
      await writer.close();

      const manager = new CheckpointManager(`file://${dir}`, 1, { checkpointOnPreemption: false });
      const step = await manager.latestStep();
      await manager.restore(step!, { t });
      await manager.restore(step!, { t });
      expect(started).not.toHaveBeenCalled();
      manager.shouldSave(step! + 1);
      expect(started).toHaveBeenCalledTimes(1);
      await manager.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("at the first shouldSave, save or prepare of a manager that never restores", async () => {
    for (const first of ["shouldSave", "save", "prepare"] as const) {
      const dir = await mkdtemp(join(tmpdir(), "cairn-worker-start-"));
      try {
        const manager = new CheckpointManager(`file://${dir}`, 1, { checkpointOnPreemption: false });
        expect(started).not.toHaveBeenCalled();
        const state = { t: hostTensor("float32", [16]) };
        if (first === "shouldSave") manager.shouldSave(1);
        else if (first === "save") await manager.save(1, state);
        else await manager.prepare(state);
        expect(started, first).toHaveBeenCalledTimes(1);
        await manager.close();
      } finally {
        started.mockClear();
        await rm(dir, { recursive: true, force: true });
      }
    }
  });

  it("never for a read-only manager, nor one told not to use it", async () => {
    const readOnly = new CheckpointManager("file:///nonexistent-cairn-root", 1, { readOnly: true });
    readOnly.shouldSave(1);
    const noWorker = new CheckpointManager("memory://no-worker", 1, {
      uploadWorker: false,
      checkpointOnPreemption: false,
    });
    noWorker.shouldSave(1);
    expect(started).not.toHaveBeenCalled();
    await readOnly.close();
    await noWorker.close();
  });
});
