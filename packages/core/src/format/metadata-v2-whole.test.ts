import { describe, expect, it } from "vitest";
import { CheckpointError } from "../errors.js";
import { type DType, DTYPE_NAMES, byteSize } from "../state/dtypes.js";
import { crc32c } from "./crc32c.js";
import { JsonReader } from "./json-reader.js";
import {
  type CheckpointMetadata,
  type ChunkMetadata,
  type DataFileMetadata,
  type EntryMetadata,
  FORMAT_NAME,
} from "./metadata.js";
import { encodeMetadata, parseMetadata, parseMetadataGenerally } from "./metadata-json.js";
import { wholeTensorDecoder } from "./metadata-v2-whole.js";
import { tensorName } from "./naming.js";
import { SharedArrays } from "./shared-arrays.js";
import { seededRandom } from "../testing/seeded-random.js";

/** Whole numbers below `n` from a seed, so a failure names a reproducible seed. */
function random(seed: number): (n: number) => number {
  const next = seededRandom(seed);
  return (n) => Math.floor(next() * n);
}

const WORDS = ["model", "layers", "mlp", "w", "b", "a.b", "ünï", 'q"', "0", "constructor_", "x".repeat(40)];
const HEX = "0123456789abcdef";

/** Metadata as Cairn writes it for a model: mostly whole tensors, some values, blobs, shards and renamed chunks. */
function randomMetadata(seed: number): CheckpointMetadata {
  const r = random(seed);
  const names = Array.from({ length: 1 + r(3) }, (_, i) => `data-r0-${i}-abc.safetensors`);
  const files: Record<string, DataFileMetadata> = {};
  for (const name of names)
    files[name] = { rank: 0, size: 1 << 20, headerLength: r(3) === 0 ? 0 : r(200), headerCrc32c: 1 };
  const blockSize = [16, 64, 1 << 20][r(3)]!;
  const hashed = r(2) === 0;
  let previous: (string | number)[] = [];
  const chunk = (
    key: (string | number)[],
    dtype: DType,
    shape: number[],
    sizes: number[],
    offsets: number[],
  ): ChunkMetadata => {
    const file = names[r(names.length)]!;
    const byteLength = byteSize(dtype, sizes);
    const ownBlock = r(5) === 0 ? 32 : blockSize;
    return {
      offsets,
      sizes,
      file,
      tensorName: r(8) === 0 ? `custom#${r(9)}` : tensorName(key, shape, { offsets, sizes }),
      byteOffset: 8 + files[file]!.headerLength + r(4096),
      byteLength,
      blockSize: ownBlock,
      crc32c: Array.from({ length: Math.ceil(byteLength / ownBlock) }, () => r(2 ** 32)),
      ...(hashed ? { hash: Array.from({ length: 32 }, () => HEX[r(16)]).join("") } : {}),
    };
  };
  const entries: EntryMetadata[] = Array.from({ length: 1 + r(30) }, (_, i): EntryMetadata => {
    const key = r(4) === 0 ? [WORDS[r(WORDS.length)]!, i] : ["model", "layers", i, WORDS[r(WORDS.length)]!, "w"];
    if (r(4) === 0 && previous.length > 0) key.splice(0, 1, ...previous.slice(0, 2));
    previous = key;
    const kind = r(10);
    if (kind === 0) return { kind: "value", key, value: r(100) };
    if (kind === 1) return { kind: "bytes", key, byteLength: 3, chunks: [chunk(key, "uint8", [3], [3], [0])] };
    const dtype = DTYPE_NAMES[r(DTYPE_NAMES.length)]!;
    const shape = Array.from({ length: r(4) }, () => (r(6) === 0 ? 0 : 1 + r(40)));
    if (kind === 2 && shape.length > 0 && shape[0]! >= 2) {
      const half = Math.floor(shape[0]! / 2);
      const rest = shape.slice(1);
      const top = chunk(
        key,
        dtype,
        shape,
        [half, ...rest],
        shape.map(() => 0),
      );
      const bottom = chunk(key, dtype, shape, [shape[0]! - half, ...rest], [half, ...rest.map(() => 0)]);
      return { kind: "tensor", key, dtype, shape, chunks: [top, bottom] };
    }
    return {
      kind: "tensor",
      key,
      dtype,
      shape,
      chunks: [
        chunk(
          key,
          dtype,
          shape,
          [...shape],
          shape.map(() => 0),
        ),
      ],
    };
  });
  return {
    format: FORMAT_NAME,
    version: hashed ? "2.2" : "2.0",
    worldSize: 1,
    createdAt: "2026-11-27T00:00:00.000Z",
    checksum: { algorithm: "crc32c", blockSize },
    files,
    entries,
    user: {},
  };
}

/** `metadata.json` bytes with their body edited and the checksum made to match again, as a forger would. */
function forged(bytes: Uint8Array, edit: (body: number[]) => void): Uint8Array {
  const text = new TextDecoder().decode(bytes);
  const prefix = /^\{"metadataCrc32c":\d+,/.exec(text)![0];
  const body = [0x7b, ...bytes.subarray(prefix.length)];
  edit(body);
  const edited = Uint8Array.from(body);
  const head = new TextEncoder().encode(`{"metadataCrc32c":${crc32c(edited)},`);
  const out = new Uint8Array(head.byteLength + edited.byteLength - 1);
  out.set(head);
  out.set(edited.subarray(1), head.byteLength);
  return out;
}

/** What a parser makes of `bytes`: the metadata, or its error's code and message. */
function outcome(parse: (bytes: Uint8Array, where: string) => CheckpointMetadata, bytes: Uint8Array): unknown {
  try {
    return { metadata: parse(bytes, "m") };
  } catch (error) {
    if (!(error instanceof CheckpointError)) throw error;
    return { code: error.code, message: error.message };
  }
}

/** Bytes that turn the grammar or a check: digits change counts, the rest structure and strings. */
const PIECES = [
  '"',
  "\\",
  "[",
  "]",
  ",",
  " ",
  "-",
  "0",
  "1",
  "9",
  "e",
  ".",
  "t",
  "b",
  "__proto__",
  "\u00e9",
  "99999999999999999",
];

describe("the whole-tensor entry decoder", () => {
  it.each(Array.from({ length: 100 }, (_, seed) => seed))(
    "gives what the general decoder gives for random metadata %i, intact and with forged edits",
    (seed) => {
      const metadata = randomMetadata(seed);
      const bytes = encodeMetadata(metadata);
      expect(outcome(parseMetadata, bytes)).toEqual(outcome(parseMetadataGenerally, bytes));
      expect(encodeMetadata(parseMetadata(bytes, "m"))).toEqual(bytes);
      const r = random(seed + 1e6);
      const entriesAt = new TextDecoder().decode(bytes).indexOf('"entries":');
      for (let round = 0; round < 20; round++) {
        const damaged = forged(bytes, (body) => {
          if (r(4) === 0) {
            // A key element the writer never writes, in place of one it does.
            const text = new TextDecoder().decode(Uint8Array.from(body));
            const from = ['"w"', '"mlp"', '"layers"'][r(3)]!;
            const to = ['"__proto__"', '"constructor"', '"prototype"'][r(3)]!;
            const at = text.indexOf(from, entriesAt + r(text.length - entriesAt));
            if (at >= 0) {
              body.length = 0;
              for (const b of new TextEncoder().encode(text.slice(0, at) + to + text.slice(at + from.length)))
                body.push(b);
            }
            return;
          }
          for (let n = 1 + r(3); n > 0; n--) {
            // Mostly inside the entries, where the fast path reads.
            const at = r(4) === 0 ? 1 + r(body.length - 1) : entriesAt + r(body.length - entriesAt);
            const piece = r(3) === 0 ? [r(256)] : [...new TextEncoder().encode(PIECES[r(PIECES.length)]!)];
            const how = r(3);
            if (how === 0) body.splice(at, 1, ...piece);
            else if (how === 1) body.splice(at, 0, ...piece);
            else body.splice(at, 1);
          }
        });
        expect(outcome(parseMetadata, damaged), `seed ${seed} round ${round}`).toEqual(
          outcome(parseMetadataGenerally, damaged),
        );
      }
    },
  );

  it("reads the entry Cairn writes for a whole tensor, and leaves any other where it was", () => {
    const files = { "d.safetensors": { rank: 0, size: 4096, headerLength: 56, headerCrc32c: 1 } };
    const context = {
      names: ["d.safetensors"],
      files,
      defaultBlockSize: 8,
      hashes: undefined,
      shapes: new SharedArrays(),
      lazyChecksums: false,
      where: "m",
    };
    const decode = (text: string, previous: (string | number)[] = []) => {
      const bytes = new TextEncoder().encode(text);
      const reader = new JsonReader(bytes);
      const entry = wholeTensorDecoder(reader, { ...context, bytes })(previous, 0);
      return { entry, position: reader.position };
    };
    const whole = decode('["t",[1,"layers",3],"float32",[2,2],[[0,64,"AAAAAAEAAAA="]]]', ["model"]);
    expect(whole.entry).toEqual({
      kind: "tensor",
      key: ["model", "layers", 3],
      dtype: "float32",
      shape: [2, 2],
      chunks: [
        {
          offsets: [0, 0],
          sizes: [2, 2],
          file: "d.safetensors",
          tensorName: "model.layers.3",
          byteOffset: 64,
          byteLength: 16,
          blockSize: 8,
          crc32c: [0, 1],
        },
      ],
    });
    // Just past the entry: the reader goes on from there.
    expect(whole.position).toBe(60);
    for (const other of [
      '["t",[0,"w"],"float32",[2,2],[[0,64,"AAAAAAEAAAA="],[0,80,"AAAAAA=="]]]', // two chunks
      '["t",[0,"w"],"float32",[2,2],[[0,64,"AAAAAAEAAAA=",[0,0],[2,2]]]]', // five fields
      '["t", [0,"w"],"float32",[2,2],[[0,64,"AAAAAAEAAAA="]]]', // whitespace
      '["t",[0,"w\\u0041"],"float32",[2,2],[[0,64,"AAAAAAEAAAA="]]]', // an escape
      '["t",[0,"__proto__"],"float32",[2,2],[[0,64,"AAAAAAEAAAA="]]]',
      '["t",[0,"w"],"float32",[2,2],[[0,48,"AAAAAAEAAAA="]]]', // inside the header
      '["t",[0,"w"],"float32",[2,2],[[0,4090,"AAAAAAEAAAA="]]]', // past the file's end
      '["t",[0,"w"],"float32",[2,2],[[1,64,"AAAAAAEAAAA="]]]', // no such file
      '["t",[0,"w"],"float32",[2,2],[[0,64,"AAAAAA=="]]]', // too few checksums
      '["t",[0,"w"],"float32",[2,2e0],[[0,64,"AAAAAAEAAAA="]]]',
      '["t",[0,"w"],"float32",[2,02],[[0,64,"AAAAAAEAAAA="]]]',
      '["t",[1,"w"],"float32",[2,2],[[0,64,"AAAAAAEAAAA="]]]', // a prefix longer than the previous key
      '["t",[0],"float32",[2,2],[[0,64,"AAAAAAEAAAA="]]]', // an empty key
      '["t",[0,"w"],"complex64",[2,2],[[0,64,"AAAAAAEAAAA="]]]',
      '["b",[0,"w"],16,[[0,64,"AAAAAAEAAAA="]]]',
      '["t",[0,"w"],"float32",[2,2],[[0,64,"AAAAAAEAAAA="]]',
    ]) {
      expect(decode(other), other).toEqual({ entry: undefined, position: 0 });
    }
  });
});
