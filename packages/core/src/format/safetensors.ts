import { type DType, safetensorsDType } from "../state/dtypes.js";
import { CheckpointError, describeValue } from "../errors.js";
import { JsonBytes } from "./json-bytes.js";

/** One tensor of a safetensors file, in file order. */
export interface SafetensorsTensor {
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly byteLength: number;
}

export interface SafetensorsLayout {
  /** The 8-byte little-endian header length followed by the JSON header, padded to 8 bytes. */
  readonly header: Uint8Array;
  /** Where each tensor's bytes start in the file (absolute offsets), in the input's order. */
  readonly offsets: readonly number[];
  readonly fileSize: number;
}

const DATA_OFFSETS = JsonBytes.encoded('],"data_offsets":[');

/**
 * Lays out a safetensors file: header first, then every tensor's raw little-endian bytes,
 * back to back (the format forbids holes). The header is padded with spaces so the data
 * section starts 8-byte aligned, as the reference implementation does.
 */
export function layoutSafetensors(
  tensors: readonly SafetensorsTensor[],
  metadata: Readonly<Record<string, string>>,
): SafetensorsLayout {
  const seen = new Set<string>();
  for (const t of tensors) {
    if (seen.has(t.name)) throw new Error(`duplicate safetensors tensor name ${JSON.stringify(t.name)}`);
    seen.add(t.name);
  }
  return layoutNamedSafetensors(
    tensors.map((t) => t.name),
    tensors,
    (t) => t.shape,
    metadata,
  );
}

/**
 * `layoutSafetensors` for tensors whose `names` (one per tensor, in order) are already unique,
 * such as `uniqueTensorNames` gives, read from the caller's own records without copying them.
 */
export function layoutNamedSafetensors<T extends { readonly dtype: DType; readonly byteLength: number }>(
  names: readonly string[],
  tensors: readonly T[],
  shapeOf: (tensor: T) => readonly number[],
  metadata: Readonly<Record<string, string>>,
): SafetensorsLayout {
  // The JSON is written as bytes (an object of 100k keys, or 100k strings, is slow to build), in the
  // order JSON.stringify gives an object: array-index names first in numeric order, then the rest as inserted.
  const starts = new Array<number>(tensors.length);
  const indexed: { index: number; tensor: number }[] = [];
  let position = 0;
  /** The names' characters: with about 88 bytes of JSON per tensor besides, the header's size, so its buffer need not grow. */
  let nameChars = 0;
  for (let i = 0; i < tensors.length; i++) {
    if (names[i] === "__metadata__") throw new Error(`duplicate safetensors tensor name ${JSON.stringify(names[i])}`);
    nameChars += names[i]!.length;
    const index = arrayIndex(names[i]!);
    if (index !== undefined) indexed.push({ index, tensor: i });
    starts[i] = position;
    position += tensors[i]!.byteLength;
  }
  const out = new JsonBytes(8 + nameChars + 88 * tensors.length + 256, 8);
  out.text("{");
  let first = true;
  // `:{"dtype":"F32","shape":[`, encoded once per dtype rather than written out per tensor.
  const opening = new Map<DType, Uint8Array>();
  const part = (i: number): void => {
    const t = tensors[i]!;
    if (!first) out.byte(0x2c);
    first = false;
    out.string(names[i]!);
    let open = opening.get(t.dtype);
    if (open === undefined)
      opening.set(t.dtype, (open = JsonBytes.encoded(`:{"dtype":"${safetensorsDType(t.dtype)}","shape":[`)));
    out.raw(open);
    const shape = shapeOf(t);
    for (let d = 0; d < shape.length; d++) {
      if (d > 0) out.byte(0x2c);
      out.integer(shape[d]!);
    }
    out.raw(DATA_OFFSETS);
    out.integer(starts[i]!);
    out.byte(0x2c);
    out.integer(starts[i]! + t.byteLength);
    out.byte(0x5d);
    out.byte(0x7d);
  };
  let next = 0;
  for (const { tensor } of indexed.sort((x, y) => x.index - y.index)) part(tensor);
  out.text(`${first ? "" : ","}"__metadata__":${JSON.stringify(metadata)}`);
  first = false;
  // The array-index names were written above, in numeric order: the rest follow in input order.
  const skip = indexed.map(({ tensor }) => tensor).sort((a, b) => a - b);
  for (let i = 0; i < tensors.length; i++) {
    if (next < skip.length && skip[next] === i) next++;
    else part(i);
  }
  out.text("}");
  // Spaces pad the JSON so the data starts 8-byte aligned.
  const jsonLength = Math.ceil((out.length - 8) / 8) * 8;
  while (out.length < 8 + jsonLength) out.byte(0x20);
  const bytes = out.bytes();
  new DataView(bytes.buffer, bytes.byteOffset).setBigUint64(0, BigInt(jsonLength), true);
  const offsets = new Array<number>(tensors.length);
  for (let i = 0; i < tensors.length; i++) offsets[i] = bytes.byteLength + starts[i]!;
  return { header: bytes, offsets, fileSize: bytes.byteLength + position };
}

/** The number an object key is ordered by when it is an array index ("0", "17", not "01" or "-1"), else undefined. */
function arrayIndex(name: string): number | undefined {
  if (name.length === 0 || name.length > 10 || (name.length > 1 && name[0] === "0")) return undefined;
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c < 48 || c > 57) return undefined;
  }
  const n = Number(name);
  return n < 2 ** 32 - 1 ? n : undefined;
}

export interface ParsedSafetensorsHeader {
  readonly headerLength: number;
  readonly metadata: Readonly<Record<string, string>>;
  readonly tensors: ReadonlyMap<string, { dtype: string; shape: number[]; dataOffsets: [number, number] }>;
}

/** Parses the JSON header of a safetensors file from its first `8 + headerLength` bytes. */
export function parseSafetensorsHeader(bytes: Uint8Array, file = "safetensors file"): ParsedSafetensorsHeader {
  if (!(bytes instanceof Uint8Array)) {
    throw new CheckpointError(
      "invalid_argument",
      `parseSafetensorsHeader: pass the file's first bytes as a Uint8Array, not ${describeValue(bytes)}`,
    );
  }
  if (bytes.byteLength < 8)
    throw new CheckpointError("corrupt", `${file}: shorter than the 8-byte header length`, { context: { file } });
  const length = Number(new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true));
  if (bytes.byteLength < 8 + length) {
    throw new CheckpointError(
      "corrupt",
      `${file}: header says ${length} bytes but only ${bytes.byteLength - 8} follow`,
      { context: { file } },
    );
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(8, 8 + length)));
  } catch (cause) {
    throw new CheckpointError("corrupt", `${file}: header is not valid JSON`, { cause, context: { file } });
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new CheckpointError("corrupt", `${file}: header is not a JSON object`, { context: { file } });
  }
  const malformed = (what: string): CheckpointError =>
    new CheckpointError("corrupt", `${file}: header entry ${JSON.stringify(what)} is malformed`, { context: { file } });
  const tensors = new Map<string, { dtype: string; shape: number[]; dataOffsets: [number, number] }>();
  // Null prototype: the names come from the file.
  const metadata = Object.create(null) as Record<string, string>;
  for (const [name, value] of Object.entries(parsed as Record<string, unknown>)) {
    if (name === "__metadata__") {
      if (typeof value !== "object" || value === null || Array.isArray(value)) throw malformed(name);
      for (const [k, v] of Object.entries(value)) {
        if (typeof v !== "string") throw malformed(name);
        metadata[k] = v;
      }
      continue;
    }
    const v = value as { dtype?: unknown; shape?: unknown; data_offsets?: unknown } | null;
    const counts = (x: unknown): x is number[] =>
      Array.isArray(x) && x.every((n) => Number.isSafeInteger(n) && (n as number) >= 0);
    if (
      typeof v !== "object" ||
      v === null ||
      typeof v.dtype !== "string" ||
      !counts(v.shape) ||
      !counts(v.data_offsets) ||
      v.data_offsets.length !== 2 ||
      v.data_offsets[0]! > v.data_offsets[1]!
    ) {
      throw malformed(name);
    }
    tensors.set(name, { dtype: v.dtype, shape: v.shape, dataOffsets: [v.data_offsets[0]!, v.data_offsets[1]!] });
  }
  return { headerLength: length, metadata, tensors };
}

/**
 * Names unique within one safetensors file. Dotted keys can collide (["a.b"] and ["a", "b"]):
 * later ones get "#2", "#3"…, as the format says, skipping any suffix a name already has.
 */
export function uniqueTensorNames(names: readonly string[]): string[] {
  const seen = new Set<string>();
  return names.map((name) => {
    let unique = name;
    for (let n = 2; seen.has(unique); n++) unique = `${name}#${n}`;
    seen.add(unique);
    return unique;
  });
}
