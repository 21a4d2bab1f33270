import { describe, expect, it } from "vitest";
import { CheckpointError } from "../errors.js";
import { seededRandom } from "../testing/seeded-random.js";
import { encodeChecksums } from "./checksum-blocks.js";
import { crc32c } from "./crc32c.js";
import { type CheckpointMetadata, FORMAT_NAME } from "./metadata.js";
import { encodeMetadata, parseMetadata, parseMetadataGenerally } from "./metadata-json.js";

// The checksums' base64 is decoded from metadata.json's bytes 16 characters at a time (the
// whole-tensor decoder and the general one), and read as JSON text first when escaped. Every
// forgery of one character of it is read by both decoders alike: escapes of the same character as
// the same metadata, anything outside the alphabet (escaped or not, a stray "=", a surrogate) as
// corrupt, another alphabet character as other sums; and alike when decoded as first read.

const BLOCKS = [1, 2, 3, 4, 5, 6, 11, 12, 13, 16, 17, 64];

/** One float32 [n] tensor per block count, whole in 16-byte blocks (the whole-tensor decoder), and one in its own block size. */
function metadata(random: () => number): CheckpointMetadata {
  let at = 64;
  const entries = BLOCKS.map((blocks, i): CheckpointMetadata["entries"][number] => {
    const byteLength = 16 * blocks;
    const chunk = {
      ...{ offsets: [0], sizes: [byteLength / 4], file: "d.safetensors", tensorName: `t${i}`, byteOffset: at },
      ...{ byteLength, blockSize: i % 4 === 3 ? 32 : 16 },
    };
    at += byteLength;
    const sums = Array.from({ length: Math.ceil(byteLength / chunk.blockSize) }, () => (random() * 2 ** 32) >>> 0);
    return {
      kind: "tensor",
      key: [`t${i}`],
      dtype: "float32",
      shape: [byteLength / 4],
      chunks: [{ ...chunk, crc32c: sums }],
    };
  });
  return {
    format: FORMAT_NAME,
    version: "2.0",
    worldSize: 1,
    createdAt: "2026-11-27T00:00:00.000Z",
    checksum: { algorithm: "crc32c", blockSize: 16 },
    files: { "d.safetensors": { rank: 0, size: at, headerLength: 56, headerCrc32c: 1 } },
    entries,
    user: {},
  };
}

/** `text` (a whole metadata.json) with its body's checksum made to match again, as a forger would. */
function forged(text: string): Uint8Array {
  const body = text.replace(/^\{"metadataCrc32c":\d+,/, "{");
  return new TextEncoder().encode(`{"metadataCrc32c":${crc32c(new TextEncoder().encode(body))},${body.slice(1)}`);
}

function outcome(
  parse: typeof parseMetadata,
  bytes: Uint8Array,
  lazyChecksums = false,
): { metadata: CheckpointMetadata } | { code: string } {
  try {
    const metadata = parse(bytes, "m", { lazyChecksums });
    // Lazily decoded checksums are refused when first read: every chunk's are read here.
    for (const entry of metadata.entries) if (entry.kind !== "value") for (const c of entry.chunks) void c.crc32c;
    return { metadata };
  } catch (error) {
    if (!(error instanceof CheckpointError)) throw error;
    return { code: error.code };
  }
}

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const escape = (c: string): string => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;

describe("forged checksums in metadata.json", () => {
  it("are read alike by the fast and general decoders: same sums, other sums, or corrupt (seeded)", () => {
    const random = seededRandom(345);
    const original = metadata(random);
    const text = new TextDecoder().decode(encodeMetadata(original));
    const same = outcome(parseMetadata, forged(text));
    expect(same).toMatchObject({ metadata: original });
    let cases = 0;
    for (const entry of original.entries) {
      if (entry.kind !== "tensor") continue;
      const base64 = encodeChecksums(entry.chunks[0]!.crc32c);
      const from = text.indexOf(`"${base64}"`) + 1;
      expect(from).toBeGreaterThan(0);
      for (let i = 0; i < base64.length; i++) {
        // Long strings: their ends (the 16-at-once loop's last group, the padding) and a sample between.
        if (i >= 24 && i < base64.length - 24 && i % 5 !== 0) continue;
        const c = base64[i]!;
        const other = ALPHABET[(ALPHABET.indexOf(c) + 1 + Math.floor(random() * 63)) % 64]!;
        const forgeries: [string, "same" | "corrupt" | "read"][] = [
          [escape(c), "same"],
          [c === "/" ? "\\/" : escape(c).toUpperCase().replace("\\U", "\\u"), "same"],
          ["=", c === "=" ? "same" : "corrupt"],
          ["", "corrupt"],
          [`${c}A`, "corrupt"],
          ...["\u0080", "\u0000", " ", "-", "_", "\\n", escape("-"), "\\ud800", "\\udc00\\ud800"].map(
            (s): [string, "corrupt"] => [s, "corrupt"],
          ),
          [c === "=" ? "=" : other, c === "=" ? "same" : "read"],
        ];
        for (const [replacement, expected] of forgeries) {
          const bytes = forged(text.slice(0, from + i) + replacement + text.slice(from + i + 1));
          const fast = outcome(parseMetadata, bytes);
          const where = `${base64} [${i}] -> ${JSON.stringify(replacement)}`;
          expect(fast, where).toEqual(outcome(parseMetadataGenerally, bytes));
          // Decoded when first read (chunks of 16 sums or more), by either decoder: the same.
          expect(outcome(parseMetadata, bytes, true), where).toEqual(fast);
          expect(outcome(parseMetadataGenerally, bytes, true), where).toEqual(fast);
          if (expected === "same") expect(fast, where).toEqual(same);
          else if (expected === "corrupt") expect(fast, where).toEqual({ code: "corrupt" });
          else expect(fast, where).toHaveProperty("metadata");
          cases++;
        }
      }
    }
    expect(cases).toBeGreaterThan(1500);
  });

  it("decoded when first read are refused then, not parsed as sums, when not base64", () => {
    const original = metadata(seededRandom(346));
    const text = new TextDecoder().decode(encodeMetadata(original));
    for (const entry of original.entries) {
      if (entry.kind !== "tensor") continue;
      const base64 = encodeChecksums(entry.chunks[0]!.crc32c);
      const from = text.indexOf(`"${base64}"`) + 1;
      const bytes = forged(text.slice(0, from + 1) + "-" + text.slice(from + 2));
      for (const parse of [parseMetadata, parseMetadataGenerally]) {
        expect(outcome(parse, bytes)).toEqual({ code: "corrupt" });
        if (entry.chunks[0]!.crc32c.length < 16) continue;
        const lazy = parse(bytes, "m", { lazyChecksums: true });
        const chunk = lazy.entries.find((e) => e.key[0] === entry.key[0])!;
        expect(() => (chunk.kind === "tensor" ? chunk.chunks[0]!.crc32c : [])).toThrow(CheckpointError);
      }
    }
  });
});
