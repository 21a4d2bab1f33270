import * as tf from "@tensorflow/tfjs-core";
import "@tensorflow/tfjs-backend-cpu";
import { type HostTensor, hostTensor, load, readMetadata, save, shardedTensor } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { locations } from "./helpers.js";

function iota(rows: number, cols: number, box: { offsets: number[]; sizes: number[] }): HostTensor<"float32"> {
  const t = hostTensor("float32", box.sizes);
  for (let r = 0; r < box.sizes[0]!; r++) {
    for (let c = 0; c < box.sizes[1]!; c++)
      t.data[r * box.sizes[1]! + c] = (box.offsets[0]! + r) * cols + box.offsets[1]! + c;
  }
  return t;
}

describe("sharded tensors in one process", () => {
  it("saves uneven blocks and loads them into another sharding, host and tfjs shards alike", async () => {
    const url = await locations.memory();
    const boxes = [
      { offsets: [0, 0], sizes: [3, 5] },
      { offsets: [0, 5], sizes: [3, 2] },
      { offsets: [3, 0], sizes: [4, 7] },
    ];
    await save(
      {
        w: shardedTensor(
          "float32",
          [7, 7],
          boxes.map((b) => ({ offsets: b.offsets, tensor: iota(7, 7, b) })),
        ),
      },
      url,
    );
    const metadata = await readMetadata(url);
    const entry = metadata.entries[0]!;
    const saved = entry.kind === "tensor" ? entry.chunks.map((c) => JSON.stringify([c.offsets, c.sizes])).sort() : [];
    expect(saved).toEqual(boxes.map((b) => JSON.stringify([b.offsets, b.sizes])).sort());

    const columns = { offsets: [0, 2], sizes: [7, 3] };
    const host = hostTensor("float32", [7, 3]);
    const variable = tf.variable(tf.zeros([2, 2]));
    const target = {
      w: shardedTensor(
        "float32",
        [7, 7],
        [
          { offsets: columns.offsets, tensor: host },
          { offsets: [5, 5], tensor: variable },
        ],
      ),
    };
    await load(target, url);
    expect([...host.data]).toEqual([...iota(7, 7, columns).data]);
    expect([...(await variable.data())]).toEqual([...iota(7, 7, { offsets: [5, 5], sizes: [2, 2] }).data]);
    // A loaded shard of an immutable tfjs tensor is replaced in the shard list.
    const immutable = { w: shardedTensor("float32", [7, 7], [{ offsets: [6, 0], tensor: tf.zeros([1, 7]) }]) };
    await load(immutable, url);
    expect([...(await (immutable.w.shards[0]!.tensor as tf.Tensor).data())]).toEqual([42, 43, 44, 45, 46, 47, 48]);
    variable.dispose();
  });

  it("refuses bad shards with a message that says what is wrong, before anything is written", () => {
    const t = hostTensor("float32", [2, 2]);
    expect(() => shardedTensor("float32", [3, 3], [{ offsets: [2, 0], tensor: t }])).toThrow(
      /reaches past the global shape \[3,3\] in dimension 0/,
    );
    expect(() => shardedTensor("float32", [4, 4], [{ offsets: [0], tensor: t }])).toThrow(
      /must both have 2 dimensions/,
    );
    expect(() =>
      shardedTensor(
        "float32",
        [4, 4],
        [
          { offsets: [0, 0], tensor: t },
          { offsets: [1, 1], tensor: t },
        ],
      ),
    ).toThrow(/shards 0 and 1 overlap/);
    expect(() => shardedTensor("float17" as "float32", [4], [])).toThrow(/dtype "float17" is not supported/);
  });

  it("rejects shards that leave part of the tensor uncovered, or a shard of another dtype, writing nothing", async () => {
    const url = await locations.memory();
    await expect(
      save({ w: shardedTensor("float32", [4, 4], [{ offsets: [0, 0], tensor: hostTensor("float32", [2, 4]) }]) }, url),
    ).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringMatching(/hold 8 of its 16 elements; every element must be in some rank's shard/),
    });
    await expect(
      save({ w: shardedTensor("float32", [4], [{ offsets: [0], tensor: hostTensor("int32", [4]) }]) }, url),
    ).rejects.toMatchObject({
      message: expect.stringMatching(/shard 0 is int32 but the sharded tensor is float32/),
    });
    await expect(readMetadata(url)).rejects.toMatchObject({ code: "not_found" });
  });
});
