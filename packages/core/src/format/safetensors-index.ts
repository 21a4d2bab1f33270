import { CheckpointError } from "../errors.js";
import { isDataFileName } from "./naming.js";

// The Hugging Face layout of a model's weights: `model-00001-of-00004.safetensors` … beside
// `model.safetensors.index.json` ({"metadata": {"total_size"}, "weight_map": {name: shard}}), as
// transformers, huggingface_hub and PyTorch DCP write it; or one `model.safetensors`.

export const SAFETENSORS_INDEX_FILE = "model.safetensors.index.json";
export const SAFETENSORS_SINGLE_FILE = "model.safetensors";

/** The largest index read: 100 MB, the limit the safetensors spec puts on a header (an index of 100k names is a few MB). */
export const MAX_INDEX_BYTES = 100_000_000;

/** The name of shard `index` (1-based) of `count`, zero-padded to five digits as transformers names them. */
export function shardFileName(index: number, count: number): string {
  const pad = (n: number): string => String(n).padStart(5, "0");
  return `model-${pad(index)}-of-${pad(count)}.safetensors`;
}

/** Whether a file of a directory belongs to a Hugging Face layout (the index, the single file or a shard): what an export replaces. */
export function isSafetensorsLayoutFile(name: string): boolean {
  return (
    name === SAFETENSORS_INDEX_FILE ||
    name === SAFETENSORS_SINGLE_FILE ||
    /^model-\d{5,}-of-\d{5,}\.safetensors$/.test(name)
  );
}

/** A parsed index: which shard holds each tensor, and `metadata.total_size` when it has one. */
export interface SafetensorsIndex {
  /** Tensor name → shard file name, in the index's order. */
  readonly weightMap: ReadonlyMap<string, string>;
  /** Every shard the index names, once each, sorted by name (the order shards are numbered in). */
  readonly shards: readonly string[];
  readonly totalSize?: number;
}

/** The index's bytes as transformers writes them: `metadata.total_size` (the tensors' bytes, headers excluded) and the weight map, indented. */
export function encodeSafetensorsIndex(totalSize: number, weightMap: ReadonlyMap<string, string>): Uint8Array {
  const map = Object.create(null) as Record<string, string>;
  for (const [name, shard] of weightMap) map[name] = shard;
  return new TextEncoder().encode(
    `${JSON.stringify({ metadata: { total_size: totalSize }, weight_map: map }, null, 2)}\n`,
  );
}

/**
 * Parses an index read from storage, which is hostile: UTF-8 JSON, an object whose `weight_map`
 * maps names to shard files that are plain `.safetensors` names in the index's own directory
 * (never a path out of it), and whose `metadata.total_size`, if any, is a byte count. Names
 * become map keys, never object keys. Throws `corrupt` naming `where` and what is wrong.
 */
export function parseSafetensorsIndex(bytes: Uint8Array, where: string): SafetensorsIndex {
  const bad = (problem: string): CheckpointError =>
    new CheckpointError("corrupt", `${where} is not a valid safetensors index: ${problem}`, {
      context: { path: where },
    });
  if (bytes.byteLength > MAX_INDEX_BYTES)
    throw bad(`it holds ${bytes.byteLength} bytes, over the ${MAX_INDEX_BYTES} read`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch (cause) {
    throw new CheckpointError("corrupt", `${where} is not a valid safetensors index: it is not UTF-8 JSON`, {
      cause,
      context: { path: where },
    });
  }
  if (!isPlainObject(parsed)) throw bad("it is not a JSON object");
  const weightMap = parsed.weight_map;
  if (!isPlainObject(weightMap)) throw bad('it has no "weight_map" object');
  const map = new Map<string, string>();
  for (const [name, shard] of Object.entries(weightMap)) {
    if (typeof shard !== "string")
      throw bad(`tensor ${JSON.stringify(name)} maps to ${JSON.stringify(shard)}, not a file name`);
    if (!isDataFileName(shard) || !shard.endsWith(".safetensors")) {
      throw bad(
        `tensor ${JSON.stringify(name)} maps to ${JSON.stringify(shard)}, which is not a .safetensors file in the index's directory (a shard is one plain file name)`,
      );
    }
    map.set(name, shard);
  }
  const metadata = parsed.metadata;
  if (metadata !== undefined && metadata !== null && !isPlainObject(metadata))
    throw bad('its "metadata" is not an object');
  const totalSize = metadata?.total_size;
  if (totalSize !== undefined && !(Number.isSafeInteger(totalSize) && (totalSize as number) >= 0))
    throw bad(`its metadata.total_size ${JSON.stringify(totalSize)} is not a byte count`);
  return {
    weightMap: map,
    shards: [...new Set(map.values())].sort(),
    ...(totalSize === undefined ? {} : { totalSize: totalSize as number }),
  };
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
