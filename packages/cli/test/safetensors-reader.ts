/**
 * A minimal safetensors reader written from the public format description
 * (https://github.com/huggingface/safetensors#format), independent of Cairn's code, so tests
 * check exported files against the spec rather than against our own writer:
 *
 * - 8 bytes: N, an unsigned little-endian 64-bit integer, the size of the header
 * - N bytes: a UTF-8 JSON object; each key a tensor name mapping to {dtype, shape, data_offsets},
 *   plus an optional "__metadata__" map of strings to strings
 * - the rest: the byte buffer; data_offsets [begin, end) are relative to its start, tensors are
 *   little-endian and row-major, and the buffer has no holes.
 */
export interface SpecTensor {
  readonly dtype: string;
  readonly shape: number[];
  readonly bytes: Uint8Array;
}

const ITEM_BYTES: Record<string, number> = {
  BOOL: 1,
  U8: 1,
  I8: 1,
  F16: 2,
  BF16: 2,
  I16: 2,
  U16: 2,
  F32: 4,
  I32: 4,
  U32: 4,
  F64: 8,
  I64: 8,
  U64: 8,
};

export function readSafetensorsSpec(file: Uint8Array): {
  tensors: Map<string, SpecTensor>;
  metadata: Record<string, string> | undefined;
} {
  if (file.length < 8) throw new Error("shorter than the 8-byte header size");
  let n = 0n;
  for (let i = 7; i >= 0; i--) n = (n << 8n) | BigInt(file[i]!);
  const headerEnd = 8 + Number(n);
  if (headerEnd > file.length) throw new Error("header size past the end of the file");
  const header = JSON.parse(Buffer.from(file.subarray(8, headerEnd)).toString("utf8")) as Record<string, unknown>;
  const buffer = file.subarray(headerEnd);
  const tensors = new Map<string, SpecTensor>();
  const spans: [number, number][] = [];
  let metadata: Record<string, string> | undefined;
  for (const [name, value] of Object.entries(header)) {
    if (name === "__metadata__") {
      metadata = value as Record<string, string>;
      for (const v of Object.values(metadata))
        if (typeof v !== "string") throw new Error("__metadata__ values must be strings");
      continue;
    }
    const {
      dtype,
      shape,
      data_offsets: offsets,
    } = value as { dtype: string; shape: number[]; data_offsets: [number, number] };
    const item = ITEM_BYTES[dtype];
    if (item === undefined) throw new Error(`unknown dtype ${dtype}`);
    const [begin, end] = offsets;
    if (end - begin !== shape.reduce((a, b) => a * b, 1) * item)
      throw new Error(`${name}: data_offsets do not match dtype and shape`);
    if (end > buffer.length) throw new Error(`${name}: data past the end of the file`);
    spans.push([begin, end]);
    tensors.set(name, { dtype, shape, bytes: buffer.slice(begin, end) });
  }
  spans.sort((a, b) => a[0] - b[0]);
  let at = 0;
  for (const [begin, end] of spans) {
    if (begin !== at) throw new Error("the byte buffer has a hole or an overlap");
    at = end;
  }
  if (at !== buffer.length) throw new Error("bytes after the last tensor");
  return { tensors, metadata };
}

/** The writer's mirror, from the same spec: for tests that need a foreign file to import. */
export function writeSafetensorsSpec(
  tensors: readonly { name: string; dtype: string; shape: number[]; bytes: Uint8Array }[],
  metadata?: Record<string, string>,
): Uint8Array {
  const header: Record<string, unknown> = metadata ? { __metadata__: metadata } : {};
  let at = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [at, at + t.bytes.length] };
    at += t.bytes.length;
  }
  const json = Buffer.from(JSON.stringify(header), "utf8");
  const out = new Uint8Array(8 + json.length + at);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  let offset = 8 + json.length;
  for (const t of tensors) {
    out.set(t.bytes, offset);
    offset += t.bytes.length;
  }
  return out;
}
