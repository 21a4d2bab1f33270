import { describe, expect, it } from "vitest";
import { FORMAT_NAME, parseMetadata } from "./metadata.js";

const encode = (value: unknown): Uint8Array => new TextEncoder().encode(JSON.stringify(value));

const valid = {
  format: FORMAT_NAME,
  version: "1.0",
  worldSize: 1,
  createdAt: "2026-11-21T00:00:00.000Z",
  checksum: { algorithm: "crc32c", blockSize: 1024 },
  files: { "d.safetensors": { rank: 0, size: 100, headerLength: 64, headerCrc32c: 1 } },
  entries: [
    {
      kind: "tensor",
      key: ["w"],
      dtype: "float32",
      shape: [4],
      chunks: [{ offsets: [0], sizes: [4], file: "d.safetensors", tensorName: "w", byteOffset: 72, byteLength: 16, crc32c: [5] }],
    },
    { kind: "value", key: ["step"], value: 3 },
  ],
  user: { step: 3 },
};

describe("metadata.json parsing", () => {
  it("accepts valid metadata and a newer minor version", () => {
    expect(parseMetadata(encode(valid), "m").entries).toHaveLength(2);
    expect(parseMetadata(encode({ ...valid, version: "1.7", futureField: true }), "m").version).toBe("1.7");
  });

  it("refuses a newer major version with unsupported_version", () => {
    expect(() => parseMetadata(encode({ ...valid, version: "2.0" }), "m")).toThrow(
      expect.objectContaining({ code: "unsupported_version", message: expect.stringMatching(/2\.0 is newer.*upgrade @cairn\/core/) }),
    );
  });

  it.each([
    ["not JSON", new TextEncoder().encode("{nope")],
    ["another format", encode({ ...valid, format: "other" })],
    ["a bad version", encode({ ...valid, version: "one" })],
    ["no checksum block size", encode({ ...valid, checksum: { algorithm: "crc32c" } })],
    ["a chunk in an unknown file", encode({ ...valid, entries: [{ ...valid.entries[0], chunks: [{ ...valid.entries[0]!.chunks![0], file: "x" }] }] })],
    ["a chunk of the wrong length", encode({ ...valid, entries: [{ ...valid.entries[0], chunks: [{ ...valid.entries[0]!.chunks![0], byteLength: 15 }] }] })],
    ["too few checksums", encode({ ...valid, entries: [{ ...valid.entries[0], chunks: [{ ...valid.entries[0]!.chunks![0], crc32c: [] }] }] })],
    ["an unknown dtype", encode({ ...valid, entries: [{ ...valid.entries[0], dtype: "complex64" }] })],
  ])("reports %s as corrupt", (_, bytes) => {
    expect(() => parseMetadata(bytes, "m")).toThrow(expect.objectContaining({ code: "corrupt" }));
  });
});
