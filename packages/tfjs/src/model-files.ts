import { type StorageAdapter, CheckpointError } from "@cairn/core";
import { withRetry } from "@cairn/core/storage";
import {
  type CheckpointReader,
  type SourceTensor,
  forbiddenKeyReason,
  parseStoredJson,
  tensorPieces,
} from "@cairn/core/ops";
import type { io } from "@tensorflow/tfjs-core";
import { USER_KEY, type TfjsModelInfo, modelInfoOf, tfjsModelOf, weightKey, weightLayout } from "./model-layout.js";

/** The file `to-tfjs` writes the weights into, as tfjs-node's `file://` handler names it. */
export const WEIGHTS_FILE = "weights.bin";
export const MODEL_FILE = "model.json";

function invalidModel(where: string, problem: string): CheckpointError {
  return new CheckpointError("invalid_argument", `${where} is not a tfjs model.json: ${problem}`, {
    context: { path: where },
  });
}

/** One weight group's files, read as one byte sequence (a weight may span two files). */
function concatenatedReader(
  storage: StorageAdapter,
  files: readonly { path: string; size: number }[],
  onRead?: (bytes: number) => void,
) {
  return async (offset: number, length: number): Promise<Uint8Array> => {
    const out = new Uint8Array(length);
    let fileStart = 0;
    const reads: Promise<void>[] = [];
    for (const file of files) {
      const from = Math.max(offset, fileStart);
      const to = Math.min(offset + length, fileStart + file.size);
      if (to > from) {
        reads.push(
          withRetry(() => storage.read(file.path, { offset: from - fileStart, length: to - from })).then((data) => {
            onRead?.(data.byteLength);
            if (data.byteLength < to - from) {
              throw new CheckpointError(
                "corrupt",
                `${file.path} is shorter than when it was listed; it changed during the conversion`,
                { context: { file: file.path } },
              );
            }
            out.set(data.subarray(0, to - from), from - offset);
          }),
        );
      }
      fileStart += file.size;
    }
    await Promise.all(reads);
    return out;
  };
}

/**
 * The entries and user metadata of a checkpoint made from a tfjs `model.json` and its weight
 * files (paths relative to the model.json's directory), each weight read from the files in
 * ranges. Checks that each group's files hold exactly the bytes its weights need.
 */
export async function tfjsModelEntries(
  storage: StorageAdapter,
  name: string,
  where: string,
  onRead?: (bytes: number) => void,
): Promise<{ entries: SourceTensor[]; user: { [USER_KEY]: TfjsModelInfo } }> {
  let model: io.ModelJSON;
  try {
    const text = new TextDecoder("utf-8", { fatal: true }).decode(await storage.read(name));
    model = parseStoredJson(text, (key) => invalidModel(where, forbiddenKeyReason(key))) as io.ModelJSON;
  } catch (error) {
    if (error instanceof CheckpointError) throw error;
    throw invalidModel(where, "not UTF-8 JSON");
  }
  if (typeof model !== "object" || model === null || model.modelTopology === undefined)
    throw invalidModel(where, "it has no modelTopology");
  if (!Array.isArray(model.weightsManifest)) throw invalidModel(where, "it has no weightsManifest");
  const dir = name.includes("/") ? name.slice(0, name.lastIndexOf("/") + 1) : "";
  const entries: SourceTensor[] = [];
  const seen = new Set<string>();
  for (const group of model.weightsManifest) {
    if (!Array.isArray(group?.paths) || !Array.isArray(group.weights))
      throw invalidModel(where, "each weightsManifest group needs paths and weights");
    const files: { path: string; size: number }[] = [];
    for (const raw of group.paths) {
      // tfjs writes "./model.weights.bin"; "." segments are dropped, ".." and absolute paths refused.
      const path =
        typeof raw === "string"
          ? raw
              .split("/")
              .filter((p) => p !== ".")
              .join("/")
          : "";
      if (path === "" || /^[a-z][a-z0-9+.-]*:/i.test(path) || raw.startsWith("/") || path.split("/").includes("..")) {
        throw invalidModel(
          where,
          `weight path ${JSON.stringify(raw)} must be relative to the model.json, inside its directory`,
        );
      }
      const stat = await storage.stat(dir + path);
      if (!stat)
        throw new CheckpointError("not_found", `${where} names weight file ${path}, which does not exist beside it`, {
          context: { path: where },
        });
      files.push({ path: dir + path, size: stat.size });
    }
    const read = concatenatedReader(storage, files, onRead);
    let at = 0;
    for (const spec of group.weights) {
      const { dtype, byteLength } = weightLayout(spec, where);
      if (seen.has(spec.name)) throw invalidModel(where, `two weights are named ${spec.name}`);
      seen.add(spec.name);
      const start = at;
      entries.push({
        kind: "tensor",
        key: weightKey(spec.name),
        dtype,
        shape: spec.shape,
        byteLength,
        read: (offset, length) => read(start + offset, length),
      });
      at += byteLength;
    }
    const total = files.reduce((n, f) => n + f.size, 0);
    if (total !== at) {
      throw new CheckpointError(
        "corrupt",
        `${where}: weight files ${group.paths.join(", ")} hold ${total} bytes, their weights need ${at}`,
        { context: { path: where } },
      );
    }
  }
  return { entries, user: { [USER_KEY]: modelInfoOf(model as unknown as Record<string, unknown>) } };
}

/**
 * Writes the tfjs model a checkpoint holds as `model.json` + `weights.bin` into a directory,
 * streaming the weights; `model.json` is written last, so a failed conversion leaves no model
 * that loads. Refuses a directory that already holds either file.
 */
export async function writeTfjsModel(
  reader: CheckpointReader,
  where: string,
  out: { storage: StorageAdapter; where: string },
  options: { signal?: AbortSignal; onWrite?: (bytes: number) => void } = {},
): Promise<{ weights: number; bytes: number }> {
  const { info, weights } = tfjsModelOf(reader.metadata, where);
  for (const file of [MODEL_FILE, WEIGHTS_FILE]) {
    if (await out.storage.stat(file)) {
      throw new CheckpointError(
        "already_exists",
        `${out.where}/${file} already exists; convert into an empty directory or delete it first`,
        {
          context: { path: `${out.where}/${file}` },
        },
      );
    }
  }
  const tensors = weights.map((w) => reader.tensor(w.entry));
  const size = tensors.reduce((n, t) => n + t.byteLength, 0);
  const body = async function* (): AsyncGenerator<Uint8Array> {
    for (const tensor of tensors) {
      for await (const data of tensorPieces(tensor, 8 << 20, options.signal)) {
        yield data;
        options.onWrite?.(data.byteLength);
      }
    }
  };
  await withRetry(() => out.storage.write(WEIGHTS_FILE, body(), { size, signal: options.signal, ifAbsent: true }), {
    signal: options.signal,
  });
  const model: io.ModelJSON = {
    ...(info as io.ModelJSON),
    weightsManifest: [{ paths: [WEIGHTS_FILE], weights: weights.map((w) => w.spec) }],
  };
  await out.storage.write(MODEL_FILE, new TextEncoder().encode(JSON.stringify(model)), {
    ifAbsent: true,
    signal: options.signal,
  });
  return { weights: weights.length, bytes: size };
}
