// The fit fixture on tfjs's wasm backend, whose tensors live in wasm memory: stopped in epoch 2
// and resumed, fit and fitDataset end with the weights of an uninterrupted run.
import "@tensorflow/tfjs-backend-wasm";
import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import { train } from "./fit-harness.js";

beforeAll(async () => {
  tf.enableProdMode();
  // The wasm backend ships its binary inside the npm package; no download is involved.
  expect(await tf.setBackend("wasm")).toBe(true);
});

describe.each(["fitDataset", "fit"] as const)("%s on the wasm backend", (mode) => {
  it("stopped in epoch 2 and resumed, ends bit-identical to an uninterrupted run", async () => {
    expect(tf.getBackend()).toBe("wasm");
    const straight = await train(`memory://fit-wasm-${mode}-straight`, mode);
    const stopped = await train(`memory://fit-wasm-${mode}`, mode, { stopBefore: 27, every: 10 });
    expect(stopped).toMatchObject({ preempted: true, step: 28 });
    const resumed = await train(`memory://fit-wasm-${mode}`, mode, { every: 10 });
    expect(resumed.crcs).toEqual(straight.crcs);
    expect(stopped.crcs).not.toEqual(straight.crcs);
  });
});
