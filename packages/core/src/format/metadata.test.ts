import { describe, expect, it } from "vitest";
import { crc32c } from "./crc32c.js";
import { FORMAT_NAME, ownFiles, referencedFiles, sharesFiles } from "./metadata.js";
import { encodeMetadata, parseMetadata } from "./metadata-json.js";

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
      chunks: [
        {
          offsets: [0],
          sizes: [4],
          file: "d.safetensors",
          tensorName: "w",
          byteOffset: 72,
          byteLength: 16,
          crc32c: [5],
        },
      ],
    },
    { kind: "value", key: ["step"], value: 3 },
  ],
  user: { step: 3 },
};

describe("metadata.json parsing", () => {
  it("accepts valid metadata and a newer minor version", () => {
    expect(parseMetadata(encode(valid), "m").entries).toHaveLength(2);
    const current = parseMetadata(encode(valid), "m");
    expect(parseMetadata(encodeMetadata({ ...current, version: "2.7", futureField: true } as never), "m").version).toBe(
      "2.7",
    );
  });

  it("encodes metadata opened by the CRC32C of its bytes without that field, and checks it when parsing", () => {
    const bytes = encodeMetadata({ ...parseMetadata(encode(valid), "m"), version: "2.0" });
    const text = new TextDecoder().decode(bytes);
    const [prefix, crc] = /^\{"metadataCrc32c":(\d+),/.exec(text)!;
    expect(crc32c(new TextEncoder().encode(`{${text.slice(prefix.length)}`))).toBe(Number(crc));
    const parsed = parseMetadata(bytes, "m");
    expect(parsed).not.toHaveProperty("metadataCrc32c");
    expect(new TextDecoder().decode(encodeMetadata({ ...parsed, metadataCrc32c: 1 } as never))).toBe(text);
    // Every single changed byte is found: by the checksum, the UTF-8 or JSON check, or a checksum field that is no longer first.
    for (let i = 0; i < bytes.byteLength; i++) {
      const damaged = bytes.slice();
      damaged[i] = damaged[i]! ^ 0x04;
      expect(() => parseMetadata(damaged, "m"), `byte ${i}`).toThrow(expect.objectContaining({ code: "corrupt" }));
    }
  });

  it("requires the checksum from version 1.1 on, and first when present", () => {
    expect(parseMetadata(encode(valid), "m").version).toBe("1.0");
    expect(() => parseMetadata(encode({ ...valid, version: "1.1" }), "m")).toThrow(
      expect.objectContaining({ code: "corrupt", message: expect.stringContaining("must open with its checksum") }),
    );
    expect(() => parseMetadata(encode({ ...valid, metadataCrc32c: 0 }), "m")).toThrow(
      expect.objectContaining({ code: "corrupt" }),
    );
  });

  it("refuses a newer major version with unsupported_version", () => {
    expect(() => parseMetadata(encode({ ...valid, version: "3.0" }), "m")).toThrow(
      expect.objectContaining({
        code: "unsupported_version",
        message: expect.stringMatching(/3\.0 is newer.*upgrade @cairn\/core/),
      }),
    );
  });

  it.each([
    ["not JSON", new TextEncoder().encode("{nope")],
    ["another format", encode({ ...valid, format: "other" })],
    ["a bad version", encode({ ...valid, version: "one" })],
    ["no checksum block size", encode({ ...valid, checksum: { algorithm: "crc32c" } })],
    [
      "a chunk in an unknown file",
      encode({
        ...valid,
        entries: [{ ...valid.entries[0], chunks: [{ ...valid.entries[0]!.chunks![0], file: "x" }] }],
      }),
    ],
    [
      "a chunk of the wrong length",
      encode({
        ...valid,
        entries: [{ ...valid.entries[0], chunks: [{ ...valid.entries[0]!.chunks![0], byteLength: 15 }] }],
      }),
    ],
    [
      "too few checksums",
      encode({
        ...valid,
        entries: [{ ...valid.entries[0], chunks: [{ ...valid.entries[0]!.chunks![0], crc32c: [] }] }],
      }),
    ],
    ["an unknown dtype", encode({ ...valid, entries: [{ ...valid.entries[0], dtype: "complex64" }] })],
    ["an empty key path", encode({ ...valid, entries: [{ kind: "value", key: [], value: 1 }] })],
    ["a value that is not a leaf", encode({ ...valid, entries: [{ kind: "value", key: ["v"], value: { a: 1 } }] })],
    ["an unknown special number", encode({ ...valid, entries: [{ kind: "value", key: ["v"], special: "Zero" }] })],
    [
      "a file name with a slash",
      new TextEncoder().encode(JSON.stringify(valid).replaceAll("d.safetensors", "../d.safetensors")),
    ],
    [
      "a header longer than its file",
      encode({ ...valid, files: { "d.safetensors": { rank: 0, size: 100, headerLength: 96, headerCrc32c: 1 } } }),
    ],
    [
      "a chunk past the end of its file",
      encode({ ...valid, files: { "d.safetensors": { rank: 0, size: 80, headerLength: 64, headerCrc32c: 1 } } }),
    ],
    [
      "a chunk outside its tensor",
      encode({
        ...valid,
        entries: [{ ...valid.entries[0], chunks: [{ ...valid.entries[0]!.chunks![0], offsets: [1] }] }],
      }),
    ],
    ["chunks that do not fill the tensor", encode({ ...valid, entries: [{ ...valid.entries[0], shape: [8] }] })],
  ])("reports %s as corrupt", (_, bytes) => {
    expect(() => parseMetadata(bytes, "m")).toThrow(expect.objectContaining({ code: "corrupt" }));
  });

  it.each([
    [
      "__proto__ in a key path",
      { ...valid, entries: [{ kind: "value", key: ["a", "__proto__", "x"], value: 1 }] },
      /entry a\.__proto__\.x has the key "__proto__"/,
    ],
    [
      "constructor in a key path",
      { ...valid, entries: [{ kind: "value", key: ["constructor"], value: 1 }] },
      /entry constructor has the key "constructor"/,
    ],
    [
      "prototype in a key path",
      { ...valid, entries: [{ kind: "value", key: [0, "prototype"], value: 1 }] },
      /"prototype"/,
    ],
    [
      "__proto__ in user metadata",
      JSON.parse(JSON.stringify(valid).replace('"user":{', '"user":{"__proto__":{"polluted":1},')) as unknown,
      /the key "__proto__"/,
    ],
    [
      "constructor as a file name",
      JSON.parse(JSON.stringify(valid).replaceAll("d.safetensors", "constructor")) as unknown,
      /"constructor"/,
    ],
  ])("refuses %s as corrupt, naming the key", (_, metadata, message) => {
    expect(() => parseMetadata(encode(metadata), "m")).toThrow(
      expect.objectContaining({ code: "corrupt", message: expect.stringMatching(message) }),
    );
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it("gives files a null prototype, so a stored name never reads an inherited property", () => {
    const { files } = parseMetadata(encode(valid), "m");
    expect(Object.getPrototypeOf(files)).toBeNull();
    expect(files.toString).toBeUndefined();
  });
});

describe("own and referenced files", () => {
  const file = { rank: 0, size: 10, headerLength: 8, headerCrc32c: 0 };
  it("splits a step's files into those it wrote and those of siblings it uses, as <sibling>/<name>", () => {
    const files = Object.assign(Object.create(null) as Record<string, typeof file & { dir?: string }>, {
      "a.safetensors": file,
      "b.safetensors": { ...file, dir: "100" },
      "c.safetensors": { ...file, rank: 1 },
      "d.safetensors": { ...file, dir: "200" },
    });
    expect(ownFiles({ files })).toEqual(["a.safetensors", "c.safetensors"]);
    expect(referencedFiles({ files })).toEqual(["100/b.safetensors", "200/d.safetensors"]);
    expect(sharesFiles(files)).toBe(true);
    expect(referencedFiles({ files: { "a.safetensors": file } })).toEqual([]);
    expect(sharesFiles({ "a.safetensors": file })).toBe(false);
  });
});
