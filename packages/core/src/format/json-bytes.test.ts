import { describe, expect, it } from "vitest";
import { JsonBytes } from "./json-bytes.js";

const UTF8 = new TextEncoder();

describe("JsonBytes", () => {
  it("writes text of every length and kind as TextEncoder does, short, long, ASCII or not", () => {
    const pieces = [
      "",
      "a",
      "x".repeat(64),
      "y".repeat(65),
      "z".repeat(5000),
      "ключ",
      `${"a".repeat(70)}ключ 😀`,
      `😀${"b".repeat(100)}`,
      `lone \ud800 surrogate ${"c".repeat(80)}`,
    ];
    const out = new JsonBytes(4);
    for (const piece of pieces) out.text(piece);
    expect(out.bytes()).toEqual(UTF8.encode(pieces.join("")));
  });

  it("writes encoded constants as they are, between other writes", () => {
    const constant = JsonBytes.encoded('],"data_offsets":[');
    const out = new JsonBytes(2);
    out.byte(0x5b);
    out.integer(12);
    out.raw(constant);
    out.raw(constant);
    out.string("k");
    expect(new TextDecoder().decode(out.bytes())).toBe('[12],"data_offsets":[],"data_offsets":["k"');
  });
});
