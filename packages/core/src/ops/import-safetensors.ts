import { CheckpointError } from "../errors.js";
import type { ValueEntry } from "../format/metadata.js";
import { parseSafetensorsHeader } from "../format/safetensors.js";
import { type DType, DTYPE_NAMES, byteSize, safetensorsDType } from "../state/dtypes.js";
import { type KeyPath, pathId } from "../state/state-dict.js";
import { withRetry } from "../storage/retry.js";
import type { StorageAdapter } from "../storage/storage-adapter.js";
import { CAIRN_METADATA_KEY, type ExportedLayout } from "./export-safetensors.js";
import type { EntrySource, SourceTensor } from "./source-tensor.js";
import { checkKeyPath, forbiddenKeyReason, parseStoredJson } from "./stored-keys.js";
import { type WriteCheckpointOptions, type WrittenCheckpoint, writeCheckpoint } from "./write-checkpoint.js";

/** The safetensors spec caps the JSON header at 100 MB, so a reader never allocates more for it. */
const MAX_HEADER_BYTES = 100_000_000;

const FROM_SAFETENSORS: ReadonlyMap<string, DType> = new Map(DTYPE_NAMES.map((d) => [safetensorsDType(d), d]));

/** A safetensors file's tensors, checked against the spec, and where its data starts. */
export interface SafetensorsFile {
  readonly dataStart: number;
  readonly metadata: Readonly<Record<string, string>>;
  readonly tensors: readonly {
    readonly name: string;
    readonly dtype: DType;
    readonly shape: readonly number[];
    readonly begin: number;
    readonly end: number;
  }[];
}

function bad(where: string, problem: string): CheckpointError {
  return new CheckpointError("corrupt", `${where} is not a valid safetensors file: ${problem}`, {
    context: { path: where },
  });
}

/**
 * Reads a safetensors file's header with two range reads (never the data), parsed by core's
 * parser and then checked against the spec: supported dtypes, sizes that match the shapes,
 * tensors tiling the data section, the file's size. Throws `not_found`, `corrupt` (not a valid
 * safetensors file) or `invalid_argument` (a dtype Cairn does not store).
 */
export async function readSafetensorsHeader(
  storage: StorageAdapter,
  name: string,
  where: string,
): Promise<SafetensorsFile> {
  const stat = await withRetry(() => storage.stat(name));
  if (!stat) throw new CheckpointError("not_found", `${where} does not exist`, { context: { path: where } });
  const prefix = await withRetry(() => storage.read(name, { offset: 0, length: 8 }));
  if (prefix.byteLength < 8) throw bad(where, "it is shorter than the 8-byte header length");
  const length = new DataView(prefix.buffer, prefix.byteOffset, 8).getBigUint64(0, true);
  if (length > BigInt(MAX_HEADER_BYTES))
    throw bad(where, `its header length ${length} is over the spec's 100 MB limit`);
  let header: ReturnType<typeof parseSafetensorsHeader>;
  try {
    header = parseSafetensorsHeader(
      await withRetry(() => storage.read(name, { offset: 0, length: 8 + Number(length) })),
      where,
    );
  } catch (error) {
    if (!(error instanceof CheckpointError) || error.code !== "corrupt") throw error;
    throw new CheckpointError(
      "corrupt",
      `${where} is not a valid safetensors file: ${error.message.replace(`${where}: `, "")}`,
      { cause: error, context: { path: where } },
    );
  }
  const tensors: SafetensorsFile["tensors"][number][] = [];
  for (const [name, { dtype: stored, shape, dataOffsets }] of header.tensors) {
    const dtype = FROM_SAFETENSORS.get(stored);
    if (!dtype) {
      throw new CheckpointError(
        "invalid_argument",
        `${where}: tensor ${name} has dtype ${stored}, which Cairn does not store; supported: ${[...FROM_SAFETENSORS.keys()].join(", ")}`,
        {
          context: { path: where, key: name },
        },
      );
    }
    const [begin, end] = dataOffsets;
    if (end - begin !== byteSize(dtype, shape))
      throw bad(where, `tensor ${name} has ${end - begin} bytes, its dtype and shape need ${byteSize(dtype, shape)}`);
    tensors.push({ name, dtype, shape, begin, end });
  }
  // The spec forbids holes and overlaps: sorted by offset, the tensors tile the data section.
  const sorted = [...tensors].sort((a, b) => a.begin - b.begin || a.end - b.end);
  let at = 0;
  for (const t of sorted) {
    if (t.begin !== at)
      throw bad(
        where,
        `tensor ${t.name} starts at ${t.begin}, where ${at} was expected (holes and overlaps are not allowed)`,
      );
    at = t.end;
  }
  const dataStart = 8 + header.headerLength;
  if (stat.size !== dataStart + at)
    throw bad(where, `the header describes ${dataStart + at} bytes but the file holds ${stat.size}`);
  return { dataStart, metadata: header.metadata, tensors };
}

/** The key path of a tensor from a foreign file: its name split at dots, as torch's fully qualified names are. */
function keysFromNames(file: SafetensorsFile, where: string): Map<string, KeyPath> {
  const keys = new Map(file.tensors.map((t) => [t.name, t.name.split(".")]));
  for (const [name, key] of keys)
    checkKeyPath(key, where, "invalid_argument", `tensor name ${name} would be the key path ${JSON.stringify(key)}`);
  const ids = new Set([...keys.values()].map((k) => pathId(k)));
  for (const [name, key] of keys) {
    for (let n = 1; n < key.length; n++) {
      if (ids.has(pathId(key.slice(0, n)))) {
        throw new CheckpointError(
          "invalid_argument",
          `${where}: tensor names ${key.slice(0, n).join(".")} and ${name} cannot both be keys of one state dict (one would hold the other)`,
          { context: { path: where } },
        );
      }
    }
  }
  return keys;
}

function exportedLayout(file: SafetensorsFile, where: string): ExportedLayout | undefined {
  const raw = file.metadata[CAIRN_METADATA_KEY];
  if (raw === undefined) return undefined;
  const invalid = (problem: string): CheckpointError => bad(where, `__metadata__.${CAIRN_METADATA_KEY} ${problem}`);
  let layout: ExportedLayout;
  try {
    layout = parseStoredJson(raw, (key) =>
      invalid(`holds the key ${JSON.stringify(key)}: ${forbiddenKeyReason(key)}`),
    ) as ExportedLayout;
  } catch (error) {
    if (error instanceof CheckpointError) throw error;
    throw invalid("is not JSON");
  }
  if (layout?.version !== 1 || !Array.isArray(layout.entries))
    throw invalid("is not a Cairn export layout of version 1");
  const names = new Set(file.tensors.map((t) => t.name));
  const claimed = new Set<string>();
  for (const entry of layout.entries) {
    if (
      !Array.isArray(entry?.key) ||
      !entry.key.every((k: unknown) => typeof k === "string" || (Number.isSafeInteger(k) && (k as number) >= 0))
    )
      throw invalid("has an entry without a key path");
    checkKeyPath(
      entry.key,
      where,
      "corrupt",
      `__metadata__.${CAIRN_METADATA_KEY} names the key path ${JSON.stringify(entry.key)}`,
    );
    if (entry.kind === "value") continue;
    if ((entry.kind !== "tensor" && entry.kind !== "bytes") || !names.has(entry.name) || claimed.has(entry.name)) {
      throw invalid(`names tensor ${JSON.stringify(entry.name)}, which the file does not hold once`);
    }
    claimed.add(entry.name);
  }
  if (claimed.size !== names.size) throw invalid("does not account for every tensor of the file");
  return layout;
}

/**
 * The entries of a checkpoint rebuilt from a safetensors file, each tensor read from the file
 * in ranges. A file `export` wrote comes back exactly (key paths, blobs, values, user
 * metadata); any other file's tensors are keyed by their names split at dots.
 */
export function safetensorsEntries(
  storage: StorageAdapter,
  name: string,
  file: SafetensorsFile,
  where: string,
): { entries: EntrySource[]; user: Readonly<Record<string, unknown>> } {
  const byName = new Map(file.tensors.map((t) => [t.name, t]));
  const source = (tensorName: string, key: KeyPath, kind: "tensor" | "bytes"): SourceTensor => {
    const t = byName.get(tensorName)!;
    if (kind === "bytes" && (t.dtype !== "uint8" || t.shape.length !== 1))
      throw bad(where, `blob ${tensorName} must be a 1-D U8 tensor`);
    return {
      kind,
      key,
      dtype: t.dtype,
      shape: t.shape,
      byteLength: t.end - t.begin,
      read: (offset, length) =>
        withRetry(() => storage.read(name, { offset: file.dataStart + t.begin + offset, length })),
    };
  };
  const layout = exportedLayout(file, where);
  if (layout) {
    return {
      entries: layout.entries.map((e) => ("name" in e ? source(e.name, e.key, e.kind) : (e as ValueEntry))),
      user: layout.user ?? {},
    };
  }
  const keys = keysFromNames(file, where);
  // File order, so a checkpoint's entries follow the file's bytes.
  return {
    entries: [...file.tensors]
      .sort((a, b) => a.begin - b.begin)
      .map((t) => source(t.name, keys.get(t.name)!, "tensor")),
    user: {},
  };
}

/**
 * Makes a checkpoint at `dir` from a safetensors file read by `readSafetensorsHeader`, the reverse
 * of `exportSafetensors`, streamed through `writeCheckpoint` (committed last; `force` replaces a
 * committed checkpoint there). Called by `cairn import`. Throws `corrupt` for a file whose
 * `__metadata__.cairn` is damaged or hostile, `invalid_argument` for tensor names that cannot be
 * keys, and what `writeCheckpoint` throws.
 */
export function importSafetensors(
  source: {
    readonly storage: StorageAdapter;
    readonly name: string;
    readonly where: string;
    readonly file: SafetensorsFile;
  },
  destination: { readonly storage: StorageAdapter; readonly dir: string },
  options: Omit<WriteCheckpointOptions, "user"> = {},
): Promise<WrittenCheckpoint> {
  const { entries, user } = safetensorsEntries(source.storage, source.name, source.file, source.where);
  return writeCheckpoint(destination.storage, destination.dir, entries, { ...options, user });
}
