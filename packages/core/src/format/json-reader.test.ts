import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CheckpointError } from "../errors.js";
import { crc32c } from "./crc32c.js";
import { JsonEncodingError, JsonReader, JsonSyntaxError, closingQuote } from "./json-reader.js";
import { type CheckpointMetadata, FORMAT_NAME } from "./metadata.js";
import { encodeMetadata, parseMetadata } from "./metadata-json.js";

const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const encode = (text: string): Uint8Array => new TextEncoder().encode(text);

/** What JSON.parse makes of `bytes` as strict UTF-8, or "invalid". */
function oracle(bytes: Uint8Array): { value: unknown } | "invalid" {
  try {
    return { value: JSON.parse(UTF8.decode(bytes)) as unknown };
  } catch {
    return "invalid";
  }
}

/** What the reader makes of `bytes[0, end)` read as one value, or "invalid"; anything but its own errors is rethrown. */
function read(bytes: Uint8Array, end = bytes.byteLength): { value: unknown } | "invalid" {
  try {
    const reader = new JsonReader(bytes, 0, end);
    const value = reader.value();
    reader.finish();
    return { value };
  } catch (error) {
    if (error instanceof JsonSyntaxError || error instanceof JsonEncodingError) return "invalid";
    throw error;
  }
}

/** Bytes JSON's grammar turns on, and some it refuses, for mutations. */
const PIECES = [
  '"',
  "\\",
  "[",
  "]",
  "{",
  "}",
  ",",
  ":",
  "-",
  "0",
  "1",
  "e",
  ".",
  "+",
  "t",
  "n",
  " ",
  "\u00e9",
  "\u0001",
];

const mutated = fc
  .tuple(
    fc.jsonValue({ maxDepth: 4 }),
    fc.array(fc.tuple(fc.nat(), fc.oneof(fc.constantFrom(...PIECES), fc.integer({ min: 0, max: 255 })), fc.nat(2)), {
      maxLength: 3,
    }),
  )
  .map(([value, edits]) => {
    const bytes = [...new TextEncoder().encode(JSON.stringify(value))];
    for (const [at, piece, how] of edits) {
      const i = bytes.length === 0 ? 0 : at % bytes.length;
      const inserted = typeof piece === "number" ? [piece] : [...new TextEncoder().encode(piece)];
      if (how === 0) bytes.splice(i, 1, ...inserted);
      else if (how === 1) bytes.splice(i, 0, ...inserted);
      else bytes.splice(i, 1);
    }
    return Uint8Array.from(bytes);
  });

describe("JsonReader", () => {
  it("reads any JSON value as JSON.parse does, and skips exactly over it", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.constantFrom(undefined, 1, "\t"), (value, space) => {
        const bytes = new TextEncoder().encode(` ${JSON.stringify(value, null, space)}\n`);
        expect(read(bytes)).toEqual({ value: JSON.parse(JSON.stringify(value)) });
        const skipper = new JsonReader(bytes);
        skipper.skip();
        skipper.finish();
      }),
      { numRuns: 500 },
    );
  });

  it("refuses exactly the bytes JSON.parse (on strict UTF-8) refuses, and reads the rest alike", () => {
    fc.assert(
      fc.property(mutated, (bytes) => {
        expect(read(bytes)).toEqual(oracle(bytes));
      }),
      { numRuns: 3000 },
    );
  });

  it("reads, skips and refuses long strings (their quotes found with indexOf) as JSON.parse does", () => {
    const long = fc
      .array(fc.constantFrom("a", "Z", "/", "+", "=", '"', "\\", "\\\\", "\u00e9", "\u0001", "é"), {
        minLength: 40,
        maxLength: 200,
      })
      .map((parts) => parts.join(""));
    fc.assert(
      fc.property(
        fc.array(long, { minLength: 1, maxLength: 3 }),
        fc.nat(),
        fc.constantFrom(...PIECES),
        (strings, at, piece) => {
          const bytes = new TextEncoder().encode(JSON.stringify(strings));
          expect(read(bytes)).toEqual({ value: strings });
          const skipper = new JsonReader(bytes);
          skipper.skip();
          skipper.finish();
          const inserted = [...bytes];
          inserted.splice(at % bytes.length, 0, ...new TextEncoder().encode(piece));
          const damaged = Uint8Array.from(inserted);
          expect(read(damaged)).toEqual(oracle(damaged));
          let skipped: "invalid" | "skipped";
          try {
            new JsonReader(damaged).skip();
            skipped = "skipped";
          } catch (error) {
            if (!(error instanceof JsonSyntaxError)) throw error;
            skipped = "invalid";
          }
          // Skipping checks structure, not every byte: it refuses no more than JSON.parse does.
          if (oracle(damaged) !== "invalid") expect(skipped).toBe("skipped");
        },
      ),
      { numRuns: 1000, seed: 34 },
    );
  });

  it("finds an unescaped string's closing quote, short or long, and leaves escaped ones to the general reader", () => {
    for (const text of ["abc", "x".repeat(63), "x".repeat(64), "y".repeat(5000)]) {
      const bytes = new TextEncoder().encode(`["${text}",1]`);
      const reader = new JsonReader(bytes);
      expect(reader.open(0x5b)).toBe(false);
      expect(reader.unescapedString()).toBe(text.length + 2);
      expect(reader.more(0x5d)).toBe(true);
      for (const escaped of [`${text}\\"`, `${text}\\\\`, `\\"${text}`]) {
        const other = new JsonReader(new TextEncoder().encode(`["${escaped}"]`));
        other.open(0x5b);
        expect(other.unescapedString()).toBe(-1);
        expect(other.value()).toBe(JSON.parse(`"${escaped}"`));
      }
      const unterminated = new JsonReader(new TextEncoder().encode(`"${text}`));
      expect(unterminated.unescapedString()).toBe(-1);
      expect(unterminated.position).toBe(0);
    }
  });

  it("passes over nesting a million deep without recursion, and reports an unclosed one", () => {
    const deep = new TextEncoder().encode(`${"[".repeat(1e6)}${"]".repeat(1e6)}`);
    const reader = new JsonReader(deep);
    reader.skip();
    reader.finish();
    expect(() => new JsonReader(deep.subarray(0, deep.byteLength - 1)).skip()).toThrow(JsonSyntaxError);
  });
});

const base: CheckpointMetadata = {
  format: FORMAT_NAME,
  version: "2.2",
  worldSize: 1,
  createdAt: "2026-11-27T00:00:00.000Z",
  checksum: { algorithm: "crc32c", blockSize: 16 },
  files: { "d.safetensors": { rank: 0, size: 4096, headerLength: 64, headerCrc32c: 1 } },
  entries: [
    {
      kind: "tensor",
      key: ["model", 0, "w"],
      dtype: "float32",
      shape: [2, 4],
      chunks: [
        {
          offsets: [0, 0],
          sizes: [2, 4],
          file: "d.safetensors",
          tensorName: "model.0.w",
          byteOffset: 72,
          byteLength: 32,
          blockSize: 16,
          crc32c: [5, 6],
          hash: "0123456789abcdef0123456789abcdef",
        },
      ],
    },
    {
      kind: "bytes",
      key: ["model", 0, "raw"],
      byteLength: 3,
      chunks: [
        {
          offsets: [0],
          sizes: [3],
          file: "d.safetensors",
          tensorName: "model.0.raw",
          byteOffset: 104,
          byteLength: 3,
          blockSize: 16,
          crc32c: [7],
          hash: "fedcba9876543210fedcba9876543210",
        },
      ],
    },
    { kind: "value", key: ["step"], value: 3 },
    { kind: "value", key: ["loss"], special: "NaN" },
  ],
  user: { step: 3, tags: ["a", "b"] },
};
/** `metadata.json` bytes with their body changed by `edit` and the checksum made to match again, as a forger would. */
function forged(bytes: Uint8Array, edit: (body: Uint8Array) => Uint8Array): Uint8Array {
  const prefix = /^\{"metadataCrc32c":\d+,/.exec(new TextDecoder().decode(bytes.subarray(0, 40)))![0];
  const body = bytes.slice(prefix.length - 1);
  body[0] = 0x7b;
  const edited = edit(body);
  const head = new TextEncoder().encode(`{"metadataCrc32c":${crc32c(edited)},`);
  const out = new Uint8Array(head.byteLength + edited.byteLength - 1);
  out.set(head);
  out.set(edited.subarray(1), head.byteLength);
  return out;
}

/** `edit` on the body as text. */
const replaced =
  (from: string, to: string) =>
  (body: Uint8Array): Uint8Array =>
    new TextEncoder().encode(new TextDecoder().decode(body).replace(from, to));

/** Forged bodies of `bytes` (1–3 edits, the checksum made to match) are refused as `corrupt` or read as metadata that writes back the same. */
function forgedBodiesHold(bytes: Uint8Array): void {
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.nat(), fc.oneof(fc.constantFrom(...PIECES), fc.integer({ min: 0, max: 255 })), fc.nat(2)), {
        minLength: 1,
        maxLength: 3,
      }),
      (edits) => {
        const damaged = forged(bytes, (original) => {
          const body = [...original];
          for (const [at, piece, how] of edits) {
            const i = 1 + (at % (body.length - 1));
            const inserted = typeof piece === "number" ? [piece] : [...new TextEncoder().encode(piece)];
            if (how === 0) body.splice(i, 1, ...inserted);
            else if (how === 1) body.splice(i, 0, ...inserted);
            else body.splice(i, 1);
          }
          return Uint8Array.from(body);
        });
        let parsed: CheckpointMetadata;
        try {
          parsed = parseMetadata(damaged, "m");
        } catch (error) {
          expect(error).toBeInstanceOf(CheckpointError);
          expect(["corrupt", "unsupported_version"]).toContain((error as CheckpointError).code);
          return;
        }
        expect(parseMetadata(encodeMetadata(parsed), "m")).toEqual(parsed);
      },
    ),
    { numRuns: 2000 },
  );
}

describe("metadata.json 2.x read from its bytes", () => {
  const bytes = encodeMetadata(base);

  it("reads back what was written", () => {
    const parsed = parseMetadata(bytes, "m");
    expect(parsed).toEqual({ ...base, files: expect.anything() as never });
    expect({ ...parsed.files }).toEqual(base.files);
    expect(encodeMetadata(parsed)).toEqual(bytes);
  });

  it("refuses a count written as -0, which would not write back the same (found by the forged-bodies property)", () => {
    const damaged = forged(bytes, (original) => {
      const text = new TextDecoder().decode(original);
      const at = text.indexOf('"rank":0');
      if (at < 0) throw new Error("no rank 0 in the fixture");
      return new TextEncoder().encode(`${text.slice(0, at)}"rank":-0${text.slice(at + 8)}`);
    });
    expect(() => parseMetadata(damaged, "m")).toThrow(expect.objectContaining({ code: "corrupt" }) as never);
  });

  it("takes forged bodies (checksum matching) as corrupt or as metadata that writes back the same", () => {
    forgedBodiesHold(bytes);
  });

  it("takes forged bodies whose checksums are long base64 strings as corrupt or as metadata that writes back the same", () => {
    /** A [1, cols] float32 tensor in one chunk of `blockSize` blocks, its sums made up. */
    const tensor = (
      key: string,
      cols: number,
      byteOffset: number,
      blockSize: number,
    ): CheckpointMetadata["entries"][number] => ({
      kind: "tensor",
      key: [key],
      dtype: "float32",
      shape: [1, cols],
      chunks: [
        {
          ...{ offsets: [0, 0], sizes: [1, cols], file: "d.safetensors", tensorName: key, byteOffset },
          ...{ byteLength: 4 * cols, blockSize },
          crc32c: Array.from({ length: (4 * cols) / blockSize }, (_, i) => (i * 2654435761 + cols) >>> 0),
        },
      ],
    });
    const long: CheckpointMetadata = {
      ...base,
      files: { "d.safetensors": { rank: 0, size: 8192, headerLength: 64, headerCrc32c: 1 } },
      // One whole chunk in the default block size (the whole-tensor decoder), one in its own (the general one).
      entries: [tensor("a", 800, 72, 16), tensor("b", 400, 3272, 32)],
    };
    const bytes = encodeMetadata(long);
    expect(parseMetadata(bytes, "m")).toEqual({ ...long, files: expect.anything() as never });
    forgedBodiesHold(bytes);
  });

  it("reads nesting 200,000 deep anywhere without a stack overflow, refusing it where Cairn expects none", () => {
    const deep = `${"[".repeat(200_000)}${"]".repeat(200_000)}`;
    for (const [from, to] of [
      ["[2,4]", deep],
      ['"user":{', `"user":{"deep":${deep},`],
      ['"user":{', `"user":{"deep":{"__proto__":${deep}},`],
      ['"version"', `"future":${deep},"version"`],
      ['"entries":[', `"entries":[${deep},`],
    ] as const) {
      const damaged = forged(bytes, replaced(from, to));
      let error: unknown;
      try {
        parseMetadata(damaged, "m");
      } catch (caught) {
        error = caught;
      }
      // An unknown top-level field is kept (a newer minor version's), and user metadata may hold
      // any JSON without a forbidden key, as JSON.parse read them; everything else is refused.
      if (from === '"version"' || to.startsWith('"user":{"deep":[')) expect(error).toBeUndefined();
      else expect(error, to.slice(0, 40)).toMatchObject({ code: "corrupt" });
    }
  });

  it("refuses a repeated entries field's first value only as JSON.parse would: the last one counts", () => {
    const damaged = forged(bytes, replaced('"entries":', '"entries":"nonsense","entries":'));
    expect(parseMetadata(damaged, "m").entries).toHaveLength(4);
  });
});

// Strings are scanned byte by byte for 64 bytes, then by indexOf with backslash runs counted back
// from each quote: every way a run of backslashes can meet that boundary, or the end of the bytes
// a reader was given, is read as JSON.parse reads it.

/** Whether `skip` passes over `bytes[0, end)` as one value. */
function skips(bytes: Uint8Array, end = bytes.byteLength): boolean {
  try {
    const reader = new JsonReader(bytes, 0, end);
    reader.skip();
    reader.finish();
    return true;
  } catch (error) {
    if (error instanceof JsonSyntaxError) return false;
    throw error;
  }
}

describe("JsonReader's string ends", () => {
  it("reads every run of backslashes before a quote, on either side of the 64-byte scan, as JSON.parse does", () => {
    let cases = 0;
    for (let before = 50; before <= 140; before++)
      for (let run = 0; run <= 5; run++)
        for (const after of ["", "b", 'x"', "\\\\", '\\"', '"]', "é"]) {
          const text = `["${"a".repeat(before)}${"\\".repeat(run)}"${after}"]`;
          const bytes = encode(text);
          const expected = oracle(bytes);
          expect(read(bytes), text).toEqual(expected);
          if (expected !== "invalid") expect(skips(bytes), text).toBe(true);
          // Readers given fewer of the same bytes: what follows their end must not be read.
          for (let end = bytes.byteLength - 5; end < bytes.byteLength; end++) {
            const cut = oracle(bytes.subarray(0, end));
            expect(read(bytes, end), `${text} to ${end}`).toEqual(cut);
            if (cut !== "invalid") expect(skips(bytes, end), `${text} to ${end}`).toBe(true);
            else if (end >= bytes.byteLength - 2) expect(skips(bytes, end), `${text} to ${end}`).toBe(false);
          }
          cases++;
        }
    expect(cases).toBe(91 * 6 * 7);
  });

  it("finds an unescaped string's closing quote only where no backslash comes before it", () => {
    for (let length = 0; length <= 200; length++)
      for (const at of [-1, 0, 62, 63, 64, 65, length - 1]) {
        const chars = Array.from({ length }, () => "A");
        if (at >= 0 && at < length) chars[at] = "\\";
        const text = `"${chars.join("")}"`;
        const bytes = encode(`${text}"`);
        const close = closingQuote(bytes, 0, text.length);
        if (at >= 0 && at < length) expect(close, text).toBe(-1);
        else expect(close, text).toBe(text.length - 1);
        // A reader given bytes that end before the closing quote finds none, though one follows.
        expect(closingQuote(bytes, 0, text.length - 1)).toBe(-1);
      }
  });
});
