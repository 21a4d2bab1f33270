import { CheckpointError } from "../errors.js";
import { CAIRN_METADATA_KEY, type ExportedLayout } from "../format/exported-layout.js";
import { layoutSafetensors, uniqueTensorNames } from "../format/safetensors.js";
import { itemSize } from "../state/dtypes.js";
import { displayKey } from "../state/state-dict.js";
import { withRetry } from "../storage/retry.js";
import type { StorageAdapter } from "../storage/storage-adapter.js";
import type { CheckpointReader } from "./checkpoint-reader.js";
import { tensorPieces } from "./source-tensor.js";

export interface ExportOptions {
  readonly signal?: AbortSignal;
  /** Bytes of a tensor assembled and written at once (default 8 MiB). */
  readonly readBytes?: number;
  readonly onWrite?: (bytes: number) => void;
  /** Replace an existing file (all-or-nothing: the old one stays whole until the new one is complete). */
  readonly force?: boolean;
}

/**
 * Consolidates a checkpoint into one safetensors file, like DCP's `dcp_to_torch_save`: every
 * tensor and blob whole, in global row-major order, named by its dotted key, whatever chunks it
 * was saved in. Streamed: `readBytes` of a tensor at a time are read through `reader` (every
 * block verified) and written, so memory stays bounded whatever the checkpoint's size. Key
 * paths, kinds, inline values and user metadata go in `__metadata__.cairn`, so import rebuilds
 * the checkpoint exactly; other tools see plain tensors.
 *
 * Called by `cairn export`. Throws `already_exists` for an existing file unless `force` (the
 * write is all-or-nothing either way), `corrupt` for a damaged checkpoint, storage errors as they come.
 */
export async function exportSafetensors(
  reader: CheckpointReader,
  out: { storage: StorageAdapter; name: string; where?: string },
  options: ExportOptions = {},
): Promise<{ bytes: number; tensors: number }> {
  const { metadata } = reader;
  const force = options.force === true;
  if (!force && (await withRetry(() => out.storage.stat(out.name), { signal: options.signal })) !== null) {
    const where = out.where ?? out.name;
    throw new CheckpointError(
      "already_exists",
      `${where} already exists; choose another name or pass --force to replace it`,
      { context: { path: where } },
    );
  }
  const tensors = metadata.entries.flatMap((e) => (e.kind === "value" ? [] : [reader.tensor(e)]));
  const names = uniqueTensorNames(tensors.map((t) => displayKey(t.key)));
  let next = 0;
  const layout: ExportedLayout = {
    version: 1,
    entries: metadata.entries.map((e) => (e.kind === "value" ? e : { name: names[next++]!, key: e.key, kind: e.kind })),
    user: metadata.user,
  };
  // "format": "pt" because Hugging Face loaders refuse a file whose format is anything else; the bytes are what torch writes.
  const file = layoutSafetensors(
    tensors.map((t, i) => ({ name: names[i]!, dtype: t.dtype, shape: t.shape, byteLength: t.byteLength })),
    { format: "pt", [CAIRN_METADATA_KEY]: JSON.stringify(layout) },
  );
  const step = options.readBytes ?? 8 << 20;
  const body = async function* (): AsyncGenerator<Uint8Array> {
    yield file.header;
    for (const tensor of tensors) {
      const size = itemSize(tensor.dtype);
      const aligned = Math.max(size, Math.floor(step / size) * size);
      for await (const data of tensorPieces(tensor, aligned, options.signal)) {
        yield data;
        options.onWrite?.(data.byteLength);
      }
    }
  };
  await withRetry(
    () => out.storage.write(out.name, body(), { size: file.fileSize, signal: options.signal, ifAbsent: !force }),
    { signal: options.signal },
  );
  return { bytes: file.fileSize, tensors: tensors.length };
}
