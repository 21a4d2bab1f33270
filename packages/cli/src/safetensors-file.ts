import {
  type DType,
  type KeyPath,
  type StorageAdapter,
  type ValueEntry,
  CheckpointError,
  DTYPE_NAMES,
  byteSize,
  displayKey,
  itemSize,
  layoutSafetensors,
  uniqueTensorNames,
  pathId,
  safetensorsDType,
  withRetry,
} from "@cairn/core";
import type { CheckpointReader, SourceTensor } from "./checkpoint-reader.js";
import { prefetched } from "./prefetch.js";
import { checkKeyPath, forbiddenKeyReason, parseStoredJson } from "./stored-keys.js";
import type { EntrySource } from "./write-checkpoint.js";

/** The `__metadata__` field that lets `import` rebuild a checkpoint exactly: key paths, kinds, values, user metadata. */
export const CAIRN_METADATA_KEY = "cairn";

/** What `__metadata__.cairn` holds (a JSON string, as safetensors metadata values are strings). */
interface ExportedLayout {
  readonly version: 1;
  readonly entries: readonly ({ readonly name: string; readonly key: KeyPath; readonly kind: "tensor" | "bytes" } | ValueEntry)[];
  readonly user: Readonly<Record<string, unknown>>;
}

/** The safetensors spec caps the JSON header at 100 MB, so a reader never allocates more for it. */
const MAX_HEADER_BYTES = 100_000_000;

const FROM_SAFETENSORS: ReadonlyMap<string, DType> = new Map(DTYPE_NAMES.map((d) => [safetensorsDType(d), d]));

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
 * was saved in. Streamed: `readBytes` of a tensor at a time are assembled from the chunks'
 * verified blocks and written, so memory stays bounded whatever the checkpoint's size. Key
 * paths, kinds, inline values and user metadata go in `__metadata__.cairn`, so `import` rebuilds
 * the checkpoint exactly; other tools see plain tensors. An existing file is `already_exists`
 * unless `force`; the write is all-or-nothing either way (an atomic create without `force`).
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
    throw new CheckpointError("already_exists", `${where} already exists; choose another name or pass --force to replace it`, { context: { path: where } });
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
      const pieces: { at: number; length: number }[] = [];
      for (let at = 0; at < tensor.byteLength; at += aligned) pieces.push({ at, length: Math.min(aligned, tensor.byteLength - at) });
      for await (const data of prefetched(pieces, 2, ({ at, length }) => tensor.read(at, length))) {
        yield data;
        options.onWrite?.(data.byteLength);
      }
    }
  };
  await withRetry(() => out.storage.write(out.name, body(), { size: file.fileSize, signal: options.signal, ifAbsent: !force }), { signal: options.signal });
  return { bytes: file.fileSize, tensors: tensors.length };
}

/** A safetensors file's tensors, checked against the spec, and where its data starts. */
export interface SafetensorsFile {
  readonly dataStart: number;
  readonly metadata: Readonly<Record<string, string>>;
  readonly tensors: readonly { readonly name: string; readonly dtype: DType; readonly shape: readonly number[]; readonly begin: number; readonly end: number }[];
}

function bad(where: string, problem: string): CheckpointError {
  return new CheckpointError("corrupt", `${where} is not a valid safetensors file: ${problem}`, { context: { path: where } });
}

/** Reads and checks a safetensors file's header with two range reads (never the data). */
export async function readSafetensorsHeader(storage: StorageAdapter, name: string, where: string): Promise<SafetensorsFile> {
  const stat = await storage.stat(name);
  if (!stat) throw new CheckpointError("not_found", `${where} does not exist`, { context: { path: where } });
  const prefix = await storage.read(name, { offset: 0, length: 8 });
  if (prefix.byteLength < 8) throw bad(where, "it is shorter than the 8-byte header length");
  const length = new DataView(prefix.buffer, prefix.byteOffset, 8).getBigUint64(0, true);
  if (length > BigInt(MAX_HEADER_BYTES)) throw bad(where, `its header length ${length} is over the spec's 100 MB limit`);
  const headerBytes = await storage.read(name, { offset: 8, length: Number(length) });
  if (headerBytes.byteLength < Number(length)) throw bad(where, `the header says ${length} bytes but the file ends after ${headerBytes.byteLength}`);
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(headerBytes));
  } catch {
    throw bad(where, "its header is not UTF-8 JSON");
  }
  if (typeof header !== "object" || header === null || Array.isArray(header)) throw bad(where, "its header is not a JSON object");
  // Null prototype: the names come from the file and index this object.
  const metadata = Object.create(null) as Record<string, string>;
  const tensors: SafetensorsFile["tensors"][number][] = [];
  for (const [name, value] of Object.entries(header as Record<string, unknown>)) {
    if (name === "__metadata__") {
      if (typeof value !== "object" || value === null || Array.isArray(value) || Object.values(value).some((v) => typeof v !== "string")) throw bad(where, "__metadata__ must map strings to strings");
      Object.assign(metadata, value);
      continue;
    }
    const v = value as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    const dtype = FROM_SAFETENSORS.get(String(v?.dtype));
    if (typeof v?.dtype === "string" && !dtype) {
      throw new CheckpointError(
        "invalid_argument",
        `${where}: tensor ${name} has dtype ${v.dtype}, which Cairn does not store; supported: ${[...FROM_SAFETENSORS.keys()].join(", ")}`,
        { context: { path: where, key: name } },
      );
    }
    const shape = v?.shape;
    const offsets = v?.data_offsets;
    if (!dtype || !Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) throw bad(where, `tensor ${name} needs a dtype and a shape of non-negative integers`);
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((d) => Number.isSafeInteger(d) && d >= 0) || offsets[1] < offsets[0]) {
      throw bad(where, `tensor ${name} needs data_offsets [begin, end]`);
    }
    const [begin, end] = offsets as [number, number];
    if (end - begin !== byteSize(dtype, shape as number[])) throw bad(where, `tensor ${name} has ${end - begin} bytes, its dtype and shape need ${byteSize(dtype, shape as number[])}`);
    tensors.push({ name, dtype, shape: shape as number[], begin, end });
  }
  // The spec forbids holes and overlaps: sorted by offset, the tensors tile the data section.
  const sorted = [...tensors].sort((a, b) => a.begin - b.begin || a.end - b.end);
  let at = 0;
  for (const t of sorted) {
    if (t.begin !== at) throw bad(where, `tensor ${t.name} starts at ${t.begin}, where ${at} was expected (holes and overlaps are not allowed)`);
    at = t.end;
  }
  const dataStart = 8 + Number(length);
  if (stat.size !== dataStart + at) throw bad(where, `the header describes ${dataStart + at} bytes but the file holds ${stat.size}`);
  return { dataStart, metadata, tensors };
}

/** The key path of a tensor from a foreign file: its name split at dots, as torch's fully qualified names are. */
function keysFromNames(file: SafetensorsFile, where: string): Map<string, KeyPath> {
  const keys = new Map(file.tensors.map((t) => [t.name, t.name.split(".")]));
  for (const [name, key] of keys) checkKeyPath(key, where, "invalid_argument", `tensor name ${name} would be the key path ${JSON.stringify(key)}`);
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
    layout = parseStoredJson(raw, (key) => invalid(`holds the key ${JSON.stringify(key)}: ${forbiddenKeyReason(key)}`)) as ExportedLayout;
  } catch (error) {
    if (error instanceof CheckpointError) throw error;
    throw invalid("is not JSON");
  }
  if (layout?.version !== 1 || !Array.isArray(layout.entries)) throw invalid("is not a Cairn export layout of version 1");
  const names = new Set(file.tensors.map((t) => t.name));
  const claimed = new Set<string>();
  for (const entry of layout.entries) {
    if (!Array.isArray(entry?.key) || !entry.key.every((k: unknown) => typeof k === "string" || (Number.isSafeInteger(k) && (k as number) >= 0))) throw invalid("has an entry without a key path");
    checkKeyPath(entry.key, where, "corrupt", `__metadata__.${CAIRN_METADATA_KEY} names the key path ${JSON.stringify(entry.key)}`);
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
export function safetensorsEntries(storage: StorageAdapter, name: string, file: SafetensorsFile, where: string, onRead?: (bytes: number) => void): { entries: EntrySource[]; user: Readonly<Record<string, unknown>> } {
  const byName = new Map(file.tensors.map((t) => [t.name, t]));
  const source = (tensorName: string, key: KeyPath, kind: "tensor" | "bytes"): SourceTensor => {
    const t = byName.get(tensorName)!;
    if (kind === "bytes" && (t.dtype !== "uint8" || t.shape.length !== 1)) throw bad(where, `blob ${tensorName} must be a 1-D U8 tensor`);
    return {
      kind,
      key,
      dtype: t.dtype,
      shape: t.shape,
      byteLength: t.end - t.begin,
      read: async (offset, length) => {
        const data = await withRetry(() => storage.read(name, { offset: file.dataStart + t.begin + offset, length }));
        onRead?.(data.byteLength);
        return data;
      },
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
  return { entries: [...file.tensors].sort((a, b) => a.begin - b.begin).map((t) => source(t.name, keys.get(t.name)!, "tensor")), user: {} };
}
