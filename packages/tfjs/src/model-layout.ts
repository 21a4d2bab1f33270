import { type DType, type KeyPath, CheckpointError, type CheckpointMetadata } from "@cairn/core";
import { type TensorEntry } from "@cairn/core/format";
import { checkKeyPath } from "@cairn/core/ops";
import type { io } from "@tensorflow/tfjs-core";

/**
 * How a tfjs model lives in a Cairn checkpoint: each weight is a tensor entry keyed
 * `["weights", <tfjs weight name>]` (a single key, so names holding `/` round-trip), in the
 * model's weight order, and everything else of the model (topology, format, training config,
 * user-defined metadata…) is the checkpoint's user metadata under `tfjs`.
 */
export const WEIGHTS_KEY = "weights";
export const USER_KEY = "tfjs";

/** Model fields other than weights, as `model.json` and `ModelArtifacts` share them. */
export const MODEL_FIELDS = [
  "modelTopology",
  "format",
  "generatedBy",
  "convertedBy",
  "trainingConfig",
  "userDefinedMetadata",
  "signature",
  "modelInitializer",
  "initializerSignature",
] as const;

export type TfjsModelInfo = Partial<Pick<io.ModelJSON, (typeof MODEL_FIELDS)[number]>>;

/** tfjs weight dtypes Cairn stores, and their bytes per element in tfjs's weight data. */
const TFJS_DTYPES: Readonly<Record<string, { dtype: DType; size: number }>> = {
  float32: { dtype: "float32", size: 4 },
  int32: { dtype: "int32", size: 4 },
  bool: { dtype: "bool", size: 1 },
};

export function weightKey(name: string): KeyPath {
  return [WEIGHTS_KEY, name];
}

/** The Cairn dtype and byte length of a tfjs weight; quantized, string and complex weights are refused. */
export function weightLayout(spec: io.WeightsManifestEntry, where: string): { dtype: DType; byteLength: number } {
  const known = TFJS_DTYPES[spec.dtype];
  if (spec.quantization) {
    throw new CheckpointError(
      "invalid_argument",
      `${where}: weight ${spec.name} is quantized (${spec.quantization.dtype}); Cairn stores weights as they are used, so convert the model without quantization`,
    );
  }
  if (!known)
    throw new CheckpointError(
      "invalid_argument",
      `${where}: weight ${spec.name} has dtype ${spec.dtype}; Cairn stores tfjs weights of dtype float32, int32 and bool`,
    );
  if (
    typeof spec.name !== "string" ||
    !Array.isArray(spec.shape) ||
    !spec.shape.every((d) => Number.isSafeInteger(d) && d >= 0)
  ) {
    throw new CheckpointError(
      "invalid_argument",
      `${where}: a weight spec needs a name and a shape of non-negative integers, got ${JSON.stringify(spec).slice(0, 200)}`,
    );
  }
  checkKeyPath(weightKey(spec.name), where, "invalid_argument", `weight ${spec.name}`);
  return { dtype: known.dtype, byteLength: spec.shape.reduce((a, b) => a * b, 1) * known.size };
}

export function modelInfoOf(source: Partial<Record<(typeof MODEL_FIELDS)[number], unknown>>): TfjsModelInfo {
  const info: Record<string, unknown> = {};
  for (const field of MODEL_FIELDS)
    if (Object.hasOwn(source, field) && source[field] !== undefined) info[field] = source[field];
  return info as TfjsModelInfo;
}

/**
 * The tfjs model a checkpoint holds: its model fields and its weights (entries keyed
 * `["weights", name]`) with their specs, in order. Throws `invalid_argument` when the
 * checkpoint holds no tfjs model, naming what to do.
 */
export function tfjsModelOf(
  metadata: CheckpointMetadata,
  where: string,
): { info: TfjsModelInfo; weights: { entry: TensorEntry; spec: io.WeightsManifestEntry }[] } {
  const info = metadata.user[USER_KEY];
  if (typeof info !== "object" || info === null || !Object.hasOwn(info, "modelTopology")) {
    throw new CheckpointError(
      "invalid_argument",
      `${where} holds no tfjs model (no user metadata "${USER_KEY}" with a modelTopology); save one with model.save(cairnIO(url)) or cairn from-tfjs`,
      { context: { path: where } },
    );
  }
  const weights: { entry: TensorEntry; spec: io.WeightsManifestEntry }[] = [];
  for (const entry of metadata.entries) {
    if (
      entry.kind !== "tensor" ||
      entry.key.length !== 2 ||
      entry.key[0] !== WEIGHTS_KEY ||
      typeof entry.key[1] !== "string"
    )
      continue;
    if (entry.dtype !== "float32" && entry.dtype !== "int32" && entry.dtype !== "bool") {
      throw new CheckpointError(
        "invalid_argument",
        `${where}: weight ${entry.key[1]} is ${entry.dtype}; tfjs weights are float32, int32 or bool`,
        {
          context: { path: where, key: entry.key[1] },
        },
      );
    }
    weights.push({ entry, spec: { name: entry.key[1], shape: [...entry.shape], dtype: entry.dtype } });
  }
  return { info: info as TfjsModelInfo, weights };
}
