import { type HostTensor, type Leaf, asyncSave, isCheckpointError, load, readMetadata } from "@cairn/core";
import { rejection, setStagedHook } from "@cairn/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { locations, sampleTensor } from "./helpers.js";

afterEach(() => setStagedHook(undefined));

/** The staged copy of `key`: the bytes the upload will write. */
function stagedBytes(leaves: readonly Leaf[], key: string): Uint8Array {
  const leaf = leaves.find((l) => l.path.join(".") === key)!;
  const data =
    leaf.kind === "bytes"
      ? leaf.data
      : leaf.kind === "tensor" && leaf.source.kind === "host"
        ? leaf.source.tensor.data
        : undefined;
  return new Uint8Array(data!.buffer, data!.byteOffset, data!.byteLength);
}

// Issue 32: a staged copy that changes between staging and writing (a buffer reused too early) fails the save.
describe.each([
  ["on the calling thread", { uploadWorker: false }],
  ["on the upload worker", { uploadWorker: true }],
  ["from a file's staged layout", { uploadWorker: true, big: true }],
] as const)("asyncSave %s", (_, how) => {
  const state = (): Record<string, HostTensor | Uint8Array> =>
    "big" in how
      ? { w: sampleTensor("float32", [1 << 20], 3), b: sampleTensor("int32", [1 << 18], 4) }
      : { w: sampleTensor("float32", [64, 64], 3), blob: Uint8Array.of(1, 2, 3, 4, 5) };

  it("fails the save, committing nothing, when a staged copy is overwritten before the write", async () => {
    const url = await locations.file();
    setStagedHook((leaves) => {
      const bytes = stagedBytes(leaves, "w");
      bytes[bytes.byteLength - 1] = ~bytes[bytes.byteLength - 1]! & 0xff;
    });
    const { staged, done } = await asyncSave(state(), { checkpointId: url, uploadWorker: how.uploadWorker });
    await staged;
    const error = await rejection(done);
    expect(error.code).toBe("corrupt");
    expect(error.message).toMatch(/state dict key w: its staged copy changed between staging and writing/);
    const missing = await readMetadata(url).catch((e: unknown) => e);
    expect(isCheckpointError(missing, "not_found") || isCheckpointError(missing, "not_committed")).toBe(true);
  });

  it("saves as before when the staged copies are left alone", async () => {
    const url = await locations.file();
    let seen = 0;
    setStagedHook((leaves) => {
      seen = leaves.filter((l) => l.kind !== "value" && l.stagedSums !== undefined).length;
    });
    const saved = state();
    await (
      await asyncSave(saved, { checkpointId: url, uploadWorker: how.uploadWorker })
    ).done;
    expect(seen).toBe(2);
    const back = (await load(url)) as Record<string, HostTensor>;
    expect(
      Buffer.from((back.w as HostTensor).data.buffer).equals(Buffer.from((saved.w as HostTensor).data.buffer)),
    ).toBe(true);
  });
});
