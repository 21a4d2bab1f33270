import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readMetadata } from "@cairn/core";
import * as tf from "@tensorflow/tfjs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerCairnRouters } from "./index.js";

let dir: string;
beforeAll(async () => {
  await tf.setBackend("cpu");
  dir = await mkdtemp(join(tmpdir(), "cairn-tfjs-router-"));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

function smallModel(): tf.Sequential {
  return tf.sequential({
    layers: [tf.layers.dense({ units: 3, inputShape: [2], activation: "relu" }), tf.layers.dense({ units: 1 })],
  });
}

const weightsOf = (model: tf.LayersModel): Promise<Float32Array[]> =>
  Promise.all(model.getWeights().map((w) => w.data() as Promise<Float32Array>));

describe('cairn+ URLs after import "@cairn/tfjs"', () => {
  it.each(["file", "memory"])(
    'model.save("cairn+%s://…") then tf.loadLayersModel of the same URL gives the same weights',
    async (scheme) => {
      const url = scheme === "file" ? `file://${dir}/model` : `memory://router-${process.pid}/model`;
      const model = smallModel();
      await model.save(`cairn+${url}`);
      expect((await readMetadata(url)).user).toMatchObject({ tfjs: { modelTopology: { class_name: "Sequential" } } });
      const loaded = await tf.loadLayersModel(`cairn+${url}`);
      expect(await weightsOf(loaded)).toEqual(await weightsOf(model));
      await expect(model.save(`cairn+${url}`)).rejects.toMatchObject({ code: "already_exists" });
    },
  );

  it("registering the same tf.io again changes nothing: a cairn+ URL still has one handler", async () => {
    registerCairnRouters(tf.io);
    expect(tf.io.getSaveHandlers(`cairn+memory://router-${process.pid}/again`)).toHaveLength(1);
    expect(tf.io.getLoadHandlers(`cairn+memory://router-${process.pid}/again`)).toHaveLength(1);
  });

  it("claims every cairn+ URL, whatever its storage, and no other URL", () => {
    expect(tf.io.getSaveHandlers("cairn+s3://bucket/models/m1")).toHaveLength(1);
    expect(tf.io.getSaveHandlers(`memory://router-${process.pid}/plain`)).toEqual([]);
    expect(tf.io.getSaveHandlers("cairn:/x")).toEqual([]);
  });
});
