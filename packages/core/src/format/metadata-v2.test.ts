import { describe, expect, it } from "vitest";
import { crc32c } from "./crc32c.js";
import { encodeChecksums } from "./checksum-blocks.js";
import { type CheckpointMetadata, FORMAT_NAME } from "./metadata.js";
import { encodeMetadata, parseMetadata } from "./metadata-json.js";

const FILE = "data-r0-0-aaaaaaaaaaaa.safetensors";

const metadata: CheckpointMetadata = {
  format: FORMAT_NAME,
  version: "2.0",
  worldSize: 1,
  createdAt: "2026-11-25T00:00:00.000Z",
  checksum: { algorithm: "crc32c", blockSize: 1 << 20 },
  files: { [FILE]: { rank: 0, size: 10000, headerLength: 120, headerCrc32c: 7 } },
  entries: [
    {
      kind: "tensor",
      key: ["model", "layers", 0, "w"],
      dtype: "float32",
      shape: [4],
      chunks: [
        {
          offsets: [0],
          sizes: [4],
          file: FILE,
          tensorName: "model.layers.0.w",
          byteOffset: 128,
          byteLength: 16,
          blockSize: 1 << 20,
          crc32c: [4294967295],
        },
      ],
    },
    {
      kind: "tensor",
      key: ["model", "layers", 1, "w"],
      dtype: "float32",
      shape: [4, 512],
      chunks: [
        {
          offsets: [0, 0],
          sizes: [2, 512],
          file: FILE,
          tensorName: "model.layers.1.w@0,0",
          byteOffset: 144,
          byteLength: 4096,
          blockSize: 1024,
          crc32c: [1, 2, 3, 4],
        },
        {
          offsets: [2, 0],
          sizes: [2, 512],
          file: FILE,
          tensorName: "other#2",
          byteOffset: 4240,
          byteLength: 4096,
          blockSize: 1024,
          crc32c: [5, 6, 7, 8],
        },
      ],
    },
    {
      kind: "bytes",
      key: ["rng"],
      byteLength: 3,
      chunks: [
        {
          offsets: [0],
          sizes: [3],
          file: FILE,
          tensorName: "rng",
          byteOffset: 8336,
          byteLength: 3,
          blockSize: 1 << 20,
          crc32c: [9],
        },
      ],
    },
    { kind: "value", key: ["step"], value: 3 },
    { kind: "value", key: ["best"], special: "NaN" },
  ],
  user: { step: 3 },
};

/** `metadata.json` bytes for a raw 2.x object, with a correct checksum: a damaged field is then found by the parser, not the CRC. */
function encodeRaw(raw: unknown): Uint8Array {
  const body = JSON.stringify(raw);
  return new TextEncoder().encode(`{"metadataCrc32c":${crc32c(new TextEncoder().encode(body))},${body.slice(1)}`);
}

function raw(): Record<string, unknown> & { files: Record<string, unknown>[]; entries: unknown[][] } {
  const text = new TextDecoder().decode(encodeMetadata(metadata));
  const { metadataCrc32c: _, ...rest } = JSON.parse(text) as Record<string, unknown>;
  return rest as never;
}

describe("metadata.json 2.x", () => {
  it("round-trips every entry kind, chunk form, block size and tensor name", () => {
    const parsed = parseMetadata(encodeMetadata(metadata), "m");
    expect(parsed.entries).toEqual(metadata.entries);
    expect(parsed.files[FILE]).toEqual(metadata.files[FILE]);
    expect(parsed.user).toEqual({ step: 3 });
  });

  it("stores a file table, key prefixes and whole-tensor chunks compactly", () => {
    const { files, entries } = raw();
    expect(files).toEqual([{ name: FILE, rank: 0, size: 10000, headerLength: 120, headerCrc32c: 7 }]);
    expect(entries[0]).toEqual([
      "t",
      [0, "model", "layers", 0, "w"],
      "float32",
      [4],
      [[0, 128, encodeChecksums([4294967295])]],
    ]);
    // The second key shares "model", "layers" with the first; its chunks carry their box and block size, and a name only where it is not the default.
    expect(entries[1]![1]).toEqual([2, 1, "w"]);
    expect((entries[1]![4] as unknown[][])[0]).toHaveLength(6);
    expect((entries[1]![4] as unknown[][])[1]).toEqual([
      0,
      4240,
      encodeChecksums([5, 6, 7, 8]),
      [2, 0],
      [2, 512],
      1024,
      "other#2",
    ]);
    expect(entries[3]).toEqual(["v", [0, "step"], 3]);
    expect(entries[4]).toEqual(["n", [0, "best"], "NaN"]);
  });

  it("names a file entry with a field it does not know unsupported_version: a later format may locate that file elsewhere", () => {
    const edited = raw();
    edited.files[0]!.from = "../90";
    expect(() => parseMetadata(encodeRaw(edited), "m")).toThrow(
      expect.objectContaining({ code: "unsupported_version", message: expect.stringContaining('"from"') }),
    );
  });

  const edit = (change: (r: ReturnType<typeof raw>) => void): Uint8Array => {
    const r = raw();
    change(r);
    return encodeRaw(r);
  };
  const chunkOf = (r: ReturnType<typeof raw>, entry: number, chunk = 0): unknown[] =>
    (r.entries[entry]![4] as unknown[][])[chunk]!;

  it.each([
    ["files as an object", edit((r) => void (r.files = { [FILE]: {} } as never))],
    ["a file listed twice", edit((r) => r.files.push({ ...r.files[0]! }))],
    ["a file name with a slash", edit((r) => void (r.files[0]!.name = "../x"))],
    ["a file without its size", edit((r) => delete r.files[0]!.size)],
    ["an entry that is an object", edit((r) => void (r.entries[0] = { kind: "tensor" } as never))],
    ["an unknown kind", edit((r) => void (r.entries[3]![0] = "x"))],
    ["a kind with too many fields", edit((r) => r.entries[3]!.push(1))],
    ["a key prefix longer than the previous key", edit((r) => void (r.entries[1]![1] = [9, "w"]))],
    ["a negative key prefix", edit((r) => void (r.entries[0]![1] = [-1, "w"]))],
    ["a key element that is an object", edit((r) => void (r.entries[3]![1] = [0, { a: 1 }]))],
    ["an empty key path", edit((r) => void (r.entries[0]![1] = [0]))],
    ["__proto__ in a key path", edit((r) => void (r.entries[3]![1] = [0, "__proto__"]))],
    [
      "__proto__ in user metadata",
      new TextEncoder().encode(
        new TextDecoder().decode(encodeRaw(raw())).replace('"user":{', '"user":{"__proto__":{"polluted":1},'),
      ),
    ],
    ["a value that is not a leaf", edit((r) => void (r.entries[3]![2] = { a: 1 }))],
    ["an unknown special number", edit((r) => void (r.entries[4]![2] = "Zero"))],
    ["an unknown dtype", edit((r) => void (r.entries[0]![2] = "complex64"))],
    ["a chunk in a file index past the table", edit((r) => void (chunkOf(r, 0)[0] = 1))],
    ["a chunk of four fields", edit((r) => void chunkOf(r, 0).push([0]))],
    ["checksums that are not base64", edit((r) => void (chunkOf(r, 0)[2] = "!!!!!!!!"))],
    ["too few checksums", edit((r) => void (chunkOf(r, 0)[2] = ""))],
    ["too many checksums", edit((r) => void (chunkOf(r, 0)[2] = encodeChecksums([1, 2])))],
    ["a checksum block of 0 bytes", edit((r) => void (chunkOf(r, 1)[5] = 0))],
    ["a chunk outside its tensor", edit((r) => void (chunkOf(r, 1)[3] = [3, 0]))],
    ["a chunk past the end of its file", edit((r) => void (chunkOf(r, 0)[1] = 9990))],
    ["a chunk inside the header", edit((r) => void (chunkOf(r, 0)[1] = 8))],
    ["chunks that do not fill the tensor", edit((r) => void (r.entries[1]![3] = [5, 512]))],
    ["a huge shape", edit((r) => void (r.entries[0]![3] = [2 ** 52]))],
  ])("reports %s as corrupt", (_, bytes) => {
    expect(() => parseMetadata(bytes, "m")).toThrow(expect.objectContaining({ code: "corrupt" }));
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it("needs its checksum, and refuses to encode another major version", () => {
    expect(() => parseMetadata(new TextEncoder().encode(JSON.stringify(raw())), "m")).toThrow(
      expect.objectContaining({ code: "corrupt", message: expect.stringContaining("must open with its checksum") }),
    );
    expect(() => encodeMetadata({ ...metadata, version: "1.1" })).toThrow(
      expect.objectContaining({ code: "invalid_argument" }),
    );
  });

  it("keeps many small tensors with realistic keys under 100 bytes each", () => {
    const entries = Array.from({ length: 20_000 }, (_, i) => ({
      // Layer numbers and offsets as long as 100k tensors would have them.
      kind: "tensor" as const,
      key: ["model", "layers", 80_000 + i, "mlp", "w"],
      dtype: "float32" as const,
      shape: [256],
      chunks: [
        {
          offsets: [0],
          sizes: [256],
          file: FILE,
          tensorName: `model.layers.${80_000 + i}.mlp.w`,
          byteOffset: 200_000_000 + i * 1024,
          byteLength: 1024,
          blockSize: 1024,
          crc32c: [4294967295 - i],
        },
      ],
    }));
    const big = {
      ...metadata,
      files: { [FILE]: { rank: 0, size: 400_000_000, headerLength: 120, headerCrc32c: 7 } },
      entries,
    };
    const bytes = encodeMetadata(big);
    expect(bytes.byteLength / entries.length).toBeLessThanOrEqual(100);
    // A chunk of one block reads back with the default block size: its one checksum is the same under either.
    const last = entries[19_999]!;
    expect(parseMetadata(bytes, "m").entries[19_999]).toEqual({
      ...last,
      chunks: [{ ...last.chunks[0], blockSize: 1 << 20 }],
    });
  });
});
