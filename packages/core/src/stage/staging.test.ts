import { describe, expect, it } from "vitest";
import { flattenStateDict } from "../state/flatten.js";
import type { TensorLike } from "../state/tensors.js";
import { stageLeaves } from "./staging.js";
import { StagingPool } from "./staging-pool.js";

/** A tfjs-like tensor whose `data()` resolves only when the test says, recording when it was asked. */
function deviceTensor(name: string, values: Float32Array, log: string[]): { tensor: TensorLike; release: () => void } {
  let release!: () => void;
  const ready = new Promise<void>((resolve) => (release = resolve));
  const tensor: TensorLike = {
    shape: [values.length],
    dtype: "float32",
    data: async () => {
      log.push(`data ${name}`);
      await ready;
      log.push(`read ${name}`);
      return values;
    },
  };
  return { tensor, release };
}

describe("copy staging of tfjs tensors", () => {
  it("asks for the next tensor's data() while the one before is still being read, one ahead", async () => {
    const log: string[] = [];
    const values = ["a", "b", "c"].map((_, i) => Float32Array.from({ length: 64 }, (_, k) => i * 100 + k));
    const tensors = ["a", "b", "c"].map((name, i) => deviceTensor(name, values[i]!, log));
    const leaves = await flattenStateDict({
      a: tensors[0]!.tensor,
      step: 3,
      b: tensors[1]!.tensor,
      c: tensors[2]!.tensor,
    });
    const staging = stageLeaves(leaves, "copy", new StagingPool());
    await new Promise((resolve) => setTimeout(resolve, 10));
    // b's download starts while a's is pending; c's only once a's is copied.
    expect(log).toEqual(["data a", "data b"]);
    tensors[0]!.release();
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(log).toEqual(["data a", "data b", "read a", "data c"]);
    tensors[2]!.release();
    tensors[1]!.release();
    const staged = await staging;
    const copies = staged.leaves.flatMap((leaf) =>
      leaf.kind === "tensor" && leaf.source.kind === "host"
        ? [Array.from(leaf.source.tensor.data as Float32Array)]
        : [],
    );
    expect(copies).toEqual(values.map((v) => Array.from(v)));
    staged.release();
  });

  it("fails with the first failed read, and a read started ahead leaves no unhandled rejection", async () => {
    const failing = (name: string): TensorLike => ({
      shape: [4],
      dtype: "float32",
      data: () => Promise.reject(new Error(`${name}: the device was lost`)),
    });
    const leaves = await flattenStateDict({ a: failing("a"), b: failing("b") });
    await expect(stageLeaves(leaves, "copy", new StagingPool())).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining("a: the device was lost"),
    });
  });
});
