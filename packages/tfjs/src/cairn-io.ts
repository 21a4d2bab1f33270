import {
  type HostTensor,
  type StateDict,
  type StorageOptions,
  CheckpointError,
  hostTensor,
  load,
  readMetadata,
  save,
} from "@cairn/core";
import "@cairn/storage-local";
import type { io } from "@tensorflow/tfjs-core";
import { USER_KEY, WEIGHTS_KEY, modelInfoOf, tfjsModelOf, weightLayout } from "./model-layout.js";

export interface CairnIOOptions {
  /** Per-protocol storage options (`{ s3: { endpoint } }`). */
  readonly storageOptions?: StorageOptions;
  readonly signal?: AbortSignal;
}

/** tfjs weight data is one buffer or, since tfjs 4.11, a list of them: one view over all of it, copied only when split. */
function weightBytes(data: io.WeightData | undefined): Uint8Array {
  if (data === undefined) return new Uint8Array(0);
  if (!Array.isArray(data)) return new Uint8Array(data);
  const out = new Uint8Array(data.reduce((n, b) => n + b.byteLength, 0));
  let at = 0;
  for (const buffer of data) {
    out.set(new Uint8Array(buffer), at);
    at += buffer.byteLength;
  }
  return out;
}

function typedWeight(dtype: "float32" | "int32" | "bool", bytes: Uint8Array): HostTensor["data"] {
  // A copy, aligned, so the host tensor owns its memory whatever offset the weight had.
  const copy = bytes.slice().buffer;
  return dtype === "float32" ? new Float32Array(copy) : dtype === "int32" ? new Int32Array(copy) : new Uint8Array(copy);
}

/**
 * A tfjs `IOHandler` that saves a model as a Cairn checkpoint at a URL (file:// and memory:// built
 * in; s3:// and gs:// once their package is installed) and loads it
 * back: `await model.save(cairnIO("s3://bucket/models/m1"))`, then
 * `await tf.loadLayersModel(cairnIO("s3://bucket/models/m1"))`. Weights are tensor entries keyed
 * `["weights", <name>]`, every block checksummed; the topology and the rest of the model are the
 * checkpoint's user metadata under `tfjs`. Saving to a committed checkpoint is `already_exists`
 * (checkpoints are written once; delete it first with `cairn rm`); loading one without a tfjs
 * model is `invalid_argument`.
 */
export function cairnIO(url: string, options: CairnIOOptions = {}): io.IOHandler {
  const where = {
    checkpointId: url,
    ...(options.storageOptions ? { storageOptions: options.storageOptions } : {}),
    ...(options.signal ? { signal: options.signal } : {}),
  };
  return {
    save: async (artifacts: io.ModelArtifacts): Promise<io.SaveResult> => {
      if (artifacts.modelTopology instanceof ArrayBuffer) {
        throw new CheckpointError(
          "invalid_argument",
          "cairnIO saves layers models (JSON topology); a GraphDef topology cannot be stored",
        );
      }
      const data = weightBytes(artifacts.weightData);
      // Null prototype: weight names index it (weightLayout refuses the names that reach a prototype).
      const weights = Object.create(null) as Record<string, HostTensor>;
      let at = 0;
      for (const spec of artifacts.weightSpecs ?? []) {
        const { dtype, byteLength } = weightLayout(spec, url);
        if (at + byteLength > data.byteLength) {
          throw new CheckpointError(
            "invalid_argument",
            `${url}: the model's weight data ends before weight ${spec.name}`,
          );
        }
        if (Object.hasOwn(weights, spec.name))
          throw new CheckpointError("invalid_argument", `${url}: the model has two weights named ${spec.name}`);
        weights[spec.name] = hostTensor(
          dtype,
          spec.shape,
          typedWeight(spec.dtype as "float32" | "int32" | "bool", data.subarray(at, at + byteLength)) as never,
        );
        at += byteLength;
      }
      const info = modelInfoOf(artifacts as Record<string, unknown>);
      await save({ [WEIGHTS_KEY]: weights }, { ...where, metadata: { [USER_KEY]: info } });
      const json = (value: unknown): number =>
        value === undefined ? 0 : new TextEncoder().encode(JSON.stringify(value)).byteLength;
      return {
        modelArtifactsInfo: {
          dateSaved: new Date(),
          modelTopologyType: "JSON",
          modelTopologyBytes: json(artifacts.modelTopology),
          weightSpecsBytes: json(artifacts.weightSpecs),
          weightDataBytes: data.byteLength,
        },
      };
    },
    load: async (): Promise<io.ModelArtifacts> => {
      const metadata = await readMetadata(where);
      const { info, weights } = tfjsModelOf(metadata, url);
      const state = (await load(where)) as StateDict & { [WEIGHTS_KEY]?: Record<string, HostTensor> };
      const tensors = weights.map(({ spec }) => state[WEIGHTS_KEY]![spec.name]!);
      const data = new Uint8Array(tensors.reduce((n, t) => n + t.data.byteLength, 0));
      let at = 0;
      for (const t of tensors) {
        data.set(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), at);
        at += t.data.byteLength;
      }
      return { ...info, weightSpecs: weights.map((w) => w.spec), weightData: data.buffer };
    },
  };
}
