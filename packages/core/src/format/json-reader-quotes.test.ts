import { describe, expect, it } from "vitest";
import { JsonEncodingError, JsonReader, JsonSyntaxError, closingQuote } from "./json-reader.js";

// Strings are scanned byte by byte for 64 bytes, then by indexOf with backslash runs counted back
// from each quote: every way a run of backslashes can meet that boundary, or the end of the bytes
// a reader was given, is read as JSON.parse reads it.

const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const encode = (text: string): Uint8Array => new TextEncoder().encode(text);

function oracle(bytes: Uint8Array): { value: unknown } | "invalid" {
  try {
    return { value: JSON.parse(UTF8.decode(bytes)) as unknown };
  } catch {
    return "invalid";
  }
}

/** The reader's value of `bytes[0, end)` (with more bytes after `end` it must not read), or "invalid". */
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
