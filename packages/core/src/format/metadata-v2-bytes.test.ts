import { describe, expect, it } from "vitest";
import { CheckpointError } from "../errors.js";
import { type DType, DTYPE_NAMES } from "../state/dtypes.js";
import { type KeyPath, displayKey } from "../state/state-dict.js";
import { crc32c } from "./crc32c.js";
import { encodeChecksums } from "./checksum-blocks.js";
import {
  type CheckpointMetadata,
  type ChunkMetadata,
  type DataFileMetadata,
  type EntryMetadata,
  CONTENT_HASH_ALGORITHM,
  FORMAT_NAME,
} from "./metadata.js";
import { encodeMetadata } from "./metadata-json.js";
import { tensorName } from "./naming.js";

/** The array encoder `writeV2` replaced, kept as the reference its bytes must equal: arrays, then JSON.stringify. */
function referenceV2(
  files: Readonly<Record<string, DataFileMetadata>>,
  entries: readonly EntryMetadata[],
  defaultBlockSize: number,
): { files: unknown[]; entries: unknown[] } {
  const names = Object.keys(files);
  const index = new Map(names.map((name, i) => [name, i]));
  const table = names.map((name) => {
    const { rank, size, headerLength, headerCrc32c } = files[name]!;
    return { name, rank, size, headerLength, headerCrc32c };
  });
  let previous: KeyPath = [];
  const encoded = entries.map((entry): unknown[] => {
    let shared = 0;
    while (shared < previous.length && shared < entry.key.length - 1 && previous[shared] === entry.key[shared])
      shared++;
    const key: unknown[] = [shared, ...entry.key.slice(shared)];
    previous = entry.key;
    if (entry.kind === "value")
      return entry.special !== undefined ? ["n", key, entry.special] : ["v", key, entry.value ?? null];
    const shape = entry.kind === "tensor" ? entry.shape : [entry.byteLength];
    const chunks = entry.chunks.map((chunk) => {
      const sums = encodeChecksums(chunk.crc32c);
      const whole =
        chunk.sizes.length === shape.length && chunk.sizes.every((s, d) => s === shape[d] && chunk.offsets[d] === 0);
      const file = index.get(chunk.file)!;
      if (chunk.tensorName !== (whole ? displayKey(entry.key) : tensorName(entry.key, shape, chunk)))
        return [file, chunk.byteOffset, sums, chunk.offsets, chunk.sizes, chunk.blockSize, chunk.tensorName];
      const oneBlock = chunk.byteLength <= chunk.blockSize && chunk.byteLength <= defaultBlockSize;
      if (chunk.blockSize !== defaultBlockSize && !oneBlock)
        return [file, chunk.byteOffset, sums, chunk.offsets, chunk.sizes, chunk.blockSize];
      return whole ? [file, chunk.byteOffset, sums] : [file, chunk.byteOffset, sums, chunk.offsets, chunk.sizes];
    });
    return entry.kind === "tensor"
      ? ["t", key, entry.dtype, entry.shape, chunks]
      : ["b", key, entry.byteLength, chunks];
  });
  return { files: table, entries: encoded };
}

/** Format 2.2's table of every chunk's content hash, when every chunk has one: each decoded by Buffer, then base64. */
function referenceHashes(entries: readonly EntryMetadata[]): { contentHashes?: unknown } {
  const chunks = entries.flatMap((entry) => (entry.kind === "value" ? [] : entry.chunks));
  if (chunks.length === 0 || chunks.some((chunk) => chunk.hash === undefined)) return {};
  const bytes = Buffer.concat(chunks.map((chunk) => Buffer.from(chunk.hash!, "hex")));
  return { contentHashes: { algorithm: CONTENT_HASH_ALGORITHM, chunks: bytes.toString("base64") } };
}

function referenceBytes(metadata: CheckpointMetadata): Uint8Array {
  const { files, entries, ...rest } = metadata;
  const body = JSON.stringify({
    ...rest,
    ...referenceV2(files, entries, metadata.checksum.blockSize),
    ...referenceHashes(entries),
  });
  return new TextEncoder().encode(`{"metadataCrc32c":${crc32c(new TextEncoder().encode(body))},${body.slice(1)}`);
}

/** A small deterministic PRNG (mulberry32), so a failure names a reproducible seed. */
function random(seed: number): (n: number) => number {
  let state = seed >>> 0;
  return (n) => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
  };
}

const WORDS = ["model", "layers", "w", "b", "a.b", 'q"uote', "back\\slash", "ünï", "tab\t", "emoji😀", "", "0", "17"];
const SPECIALS = ["NaN", "Infinity", "-Infinity", "-0"] as const;
const VALUES = [0, -3.5, 1e21, 2 ** 53 + 2, "text", 'q"', true, false, null, {}, [], undefined];

function randomMetadata(seed: number): CheckpointMetadata {
  const r = random(seed);
  const fileNames = Array.from({ length: 1 + r(3) }, (_, i) => `data-r${i}-${r(5)}-abc.safetensors`);
  const files: Record<string, DataFileMetadata> = {};
  for (const [i, name] of fileNames.entries())
    files[name] = { rank: i, size: r(2 ** 40), headerLength: r(1e6), headerCrc32c: r(2 ** 32) };
  const blockSize = [1024, 1 << 20, 4096][r(3)]!;
  const previousKey: (string | number)[] = [];
  const entries: EntryMetadata[] = Array.from({ length: r(40) }, () => {
    const key: (string | number)[] = previousKey.slice(0, r(previousKey.length + 1));
    for (let n = 1 + r(3); n > 0; n--) key.push(r(3) === 0 ? r(100_000) : WORDS[r(WORDS.length)]!);
    previousKey.splice(0, previousKey.length, ...key);
    const kind = r(4);
    if (kind === 0)
      return r(2) === 0
        ? { kind: "value", key, value: VALUES[r(VALUES.length)] as never }
        : { kind: "value", key, special: SPECIALS[r(4)]! };
    const dtype: DType = kind === 3 ? "uint8" : DTYPE_NAMES[r(DTYPE_NAMES.length)]!;
    const shape = kind === 3 ? [1 + r(5000)] : Array.from({ length: r(4) }, () => 1 + r(300));
    const pieces = shape.length > 0 && r(2) === 0 ? 2 : 1;
    const chunks: ChunkMetadata[] = Array.from({ length: pieces }, (_, p) => {
      const sizes = pieces === 1 ? [...shape] : [Math.ceil(shape[0]! / 2), ...shape.slice(1)];
      const offsets = shape.map((_, d) => (d === 0 && p === 1 ? sizes[0]! : 0));
      const own = { offsets, sizes };
      const name = r(4) === 0 ? `custom#${r(9)}` : tensorName(key, shape, own);
      const chunkBlock = [blockSize, 1024, 2048][r(3)]!;
      const byteLength = r(3) === 0 ? r(900) : r(10_000);
      return {
        ...own,
        file: fileNames[r(fileNames.length)]!,
        tensorName: name,
        byteOffset: r(2 ** 40),
        byteLength,
        blockSize: chunkBlock,
        crc32c: Array.from({ length: 1 + r(4) }, () => r(2 ** 32)),
      };
    });
    return kind === 3
      ? { kind: "bytes", key, byteLength: shape[0]!, chunks }
      : { kind: "tensor", key, dtype, shape, chunks };
  });
  // Content hashes from a PRNG of their own, so the layouts above stay those of earlier versions:
  // on every chunk (either case of hex), on none, or on some.
  const h = random(seed + 1_000_000);
  const hashing = h(3);
  for (const entry of entries)
    if (entry.kind !== "value")
      for (const chunk of entry.chunks)
        if (hashing === 0 || (hashing === 2 && h(4) > 0)) {
          const hex = Array.from({ length: 32 }, () => "0123456789abcdef"[h(16)]).join("");
          (chunk as { hash?: string }).hash = h(8) === 0 ? hex.toUpperCase() : hex;
        }
  const user = r(2) === 0 ? { step: r(100), note: WORDS[r(WORDS.length)] } : {};
  return {
    format: FORMAT_NAME,
    version: "2.0",
    worldSize: 1 + r(8),
    createdAt: "2026-11-25T00:00:00.000Z",
    checksum: { algorithm: "crc32c", blockSize },
    files,
    entries,
    user,
  };
}

describe("metadata.json 2.x bytes", () => {
  it.each(Array.from({ length: 300 }, (_, seed) => seed))(
    "writes the same bytes as arrays + JSON.stringify for random layout %i",
    (seed) => {
      const metadata = randomMetadata(seed);
      expect(new TextDecoder().decode(encodeMetadata(metadata))).toBe(
        new TextDecoder().decode(referenceBytes(metadata)),
      );
    },
  );

  it("stores a whole chunk's name that differs from its dotted key only around an index", () => {
    const metadata = randomMetadata(3);
    const file = Object.keys(metadata.files)[0]!;
    const names = [
      "layers.12.w",
      "layers.1.w",
      "layers.13.w",
      "layers.012.w",
      "layers.21.w",
      "layers.12",
      "layers.12.w.x",
      "layers.1.2.w",
      "layers.120.w",
      "layers.w",
    ];
    const entries: EntryMetadata[] = names.map((tensorName, i) => ({
      kind: "tensor",
      key: ["layers", 12, "w"],
      dtype: "float32",
      shape: [2],
      chunks: [
        {
          offsets: [0],
          sizes: [2],
          file,
          tensorName,
          byteOffset: 8 * i,
          byteLength: 8,
          blockSize: metadata.checksum.blockSize,
          crc32c: [i],
        },
      ],
    }));
    const encoded = new TextDecoder().decode(encodeMetadata({ ...metadata, entries }));
    expect(encoded).toBe(new TextDecoder().decode(referenceBytes({ ...metadata, entries })));
    for (const name of names.slice(1)) expect(encoded).toContain(JSON.stringify(name));
  });

  it("writes the same bytes when the content hashes are given as bytes (a save's), and refuses a table of another count", () => {
    let tables = 0;
    for (let seed = 0; seed < 300; seed++) {
      const metadata = randomMetadata(seed);
      const chunks = metadata.entries.flatMap((entry) => (entry.kind === "value" ? [] : entry.chunks));
      if (chunks.length === 0 || chunks.some((chunk) => chunk.hash === undefined)) continue;
      tables++;
      const table = new Uint8Array(Buffer.concat(chunks.map((chunk) => Buffer.from(chunk.hash!, "hex"))));
      expect(Buffer.compare(encodeMetadata(metadata, table), encodeMetadata(metadata)), `layout ${seed}`).toBe(0);
      // A save's chunks carry no hash strings beside the table: the same bytes.
      const bare = {
        ...metadata,
        entries: metadata.entries.map((entry) =>
          entry.kind === "value" ? entry : { ...entry, chunks: entry.chunks.map(({ hash: _, ...chunk }) => chunk) },
        ),
      };
      expect(Buffer.compare(encodeMetadata(bare, table), encodeMetadata(metadata)), `layout ${seed}, bare`).toBe(0);
      expect(() => encodeMetadata(metadata, table.subarray(16)), `layout ${seed}`).toThrow(
        expect.objectContaining({ code: "invalid_argument", message: expect.stringContaining("content hashes given") }),
      );
    }
    expect(tables).toBeGreaterThan(50);
  });

  it("refuses a content hash that is not 32 hex digits, even where the hashes together are", () => {
    const metadata = randomMetadata(11);
    const chunks = metadata.entries.flatMap((entry) => (entry.kind === "value" ? [] : entry.chunks));
    expect(chunks.length).toBeGreaterThan(1);
    const hex = "0123456789abcdef".repeat(2);
    const withHashes = (hashOf: (i: number) => string | undefined): CheckpointMetadata => {
      let i = 0;
      const entries = metadata.entries.map((entry) =>
        entry.kind === "value"
          ? entry
          : { ...entry, chunks: entry.chunks.map((chunk) => ({ ...chunk, hash: hashOf(i++) })) },
      );
      return { ...metadata, entries };
    };
    // 31 and 33 digits: 64 together, which one decoding of the joined hashes took for two hashes.
    const uneven = withHashes((i) => (i === 0 ? hex.slice(1) : i === 1 ? `${hex}a` : hex));
    expect(() => encodeMetadata(uneven)).toThrow(/content hash is not 32 hex digits \(123456789abcdef/);
    for (const bad of [`${hex.slice(0, 31)}g`, `${hex.slice(0, 30)}\u00e9a`, `x${hex.slice(1)}`])
      expect(() => encodeMetadata(withHashes((i) => (i === 1 ? bad : hex)))).toThrow(
        expect.objectContaining({ code: "invalid_argument", message: expect.stringContaining(bad) }),
      );
    // Without a hash on every chunk there is no table, and nothing to refuse.
    expect(() => encodeMetadata(withHashes((i) => (i === 0 ? undefined : "bad")))).not.toThrow();
  });

  it("refuses a chunk in a file the table does not list", () => {
    const metadata = randomMetadata(7);
    const entry: EntryMetadata = {
      kind: "bytes",
      key: ["x"],
      byteLength: 1,
      chunks: [
        {
          offsets: [0],
          sizes: [1],
          file: "elsewhere",
          tensorName: "x",
          byteOffset: 0,
          byteLength: 1,
          blockSize: 1024,
          crc32c: [1],
        },
      ],
    };
    expect(() => encodeMetadata({ ...metadata, entries: [entry] })).toThrow(CheckpointError);
  });
});
