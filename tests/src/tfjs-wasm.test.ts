import "@tensorflow/tfjs-backend-wasm";
import * as tf from "@tensorflow/tfjs-core";
import { load, save } from "@cairn/core";
import { beforeAll, describe, expect, it } from "vitest";
import { locations } from "./helpers.js";

beforeAll(async () => {
  // The wasm backend ships its binary inside the npm package; no download is involved.
  expect(await tf.setBackend("wasm")).toBe(true);
  await tf.ready();
});

describe("tfjs on the wasm backend", () => {
  it("saves and restores variables whose values live in wasm memory", async () => {
    expect(tf.getBackend()).toBe("wasm");
    const url = await locations.memory();
    const w = tf.variable(tf.randomNormal([32, 16], 0, 1, "float32", 7));
    const b = tf.variable(tf.range(0, 16, 1, "int32"));
    const expectedW = await w.data();
    await save({ layer: { w, b } }, url);
    const w2 = tf.variable(tf.zeros([32, 16]));
    const b2 = tf.variable(tf.zeros([16], "int32"));
    await load({ layer: { w: w2, b: b2 } }, url);
    expect(await w2.data()).toEqual(expectedW);
    expect(await b2.data()).toEqual(Int32Array.from({ length: 16 }, (_, i) => i));
  });
});
