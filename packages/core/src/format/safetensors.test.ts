import { describe, expect, it } from "vitest";
import { layoutSafetensors, parseSafetensorsHeader } from "./safetensors.js";

describe("safetensors layout", () => {
  it("writes an 8-byte aligned header whose offsets cover the data without holes", () => {
    const layout = layoutSafetensors(
      [
        { name: "a", dtype: "float32", shape: [2, 3], byteLength: 24 },
        { name: "b.c", dtype: "bfloat16", shape: [], byteLength: 2 },
        { name: "empty", dtype: "int64", shape: [0, 4], byteLength: 0 },
      ],
      { format: "cairn-checkpoint/1" },
    );
    expect(layout.header.byteLength % 8).toBe(0);
    const parsed = parseSafetensorsHeader(layout.header);
    expect(parsed.headerLength).toBe(layout.header.byteLength - 8);
    expect(parsed.metadata).toEqual({ format: "cairn-checkpoint/1" });
    expect(parsed.tensors.get("a")).toEqual({ dtype: "F32", shape: [2, 3], dataOffsets: [0, 24] });
    expect(parsed.tensors.get("b.c")).toEqual({ dtype: "BF16", shape: [], dataOffsets: [24, 26] });
    expect(parsed.tensors.get("empty")).toEqual({ dtype: "I64", shape: [0, 4], dataOffsets: [26, 26] });
    expect(layout.offsets).toEqual([
      layout.header.byteLength,
      layout.header.byteLength + 24,
      layout.header.byteLength + 26,
    ]);
    expect(layout.fileSize).toBe(layout.header.byteLength + 26);
  });

  it("rejects duplicate names and reports damaged headers as corrupt", () => {
    expect(() =>
      layoutSafetensors(
        [
          { name: "x", dtype: "uint8", shape: [1], byteLength: 1 },
          { name: "x", dtype: "uint8", shape: [1], byteLength: 1 },
        ],
        {},
      ),
    ).toThrow(/duplicate/);
    const { header } = layoutSafetensors([{ name: "x", dtype: "uint8", shape: [1], byteLength: 1 }], {});
    expect(() => parseSafetensorsHeader(header.subarray(0, 12))).toThrow(expect.objectContaining({ code: "corrupt" }));
    const broken = header.slice();
    broken[8] = 0x5b;
    broken[9] = 0x5b;
    expect(() => parseSafetensorsHeader(broken)).toThrow(expect.objectContaining({ code: "corrupt" }));
  });

  it("parses hostile headers into null-prototype metadata and reports malformed entries as corrupt", () => {
    const header = (json: string): Uint8Array => {
      const body = new TextEncoder().encode(json);
      const bytes = new Uint8Array(8 + body.byteLength);
      new DataView(bytes.buffer).setBigUint64(0, BigInt(body.byteLength), true);
      bytes.set(body, 8);
      return bytes;
    };
    const parsed = parseSafetensorsHeader(
      header('{"__metadata__":{"__proto__":"x"},"constructor":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'),
    );
    expect(Object.getPrototypeOf(parsed.metadata)).toBeNull();
    expect(Object.keys(parsed.metadata)).toEqual(["__proto__"]);
    expect(parsed.tensors.get("constructor")?.dataOffsets).toEqual([0, 1]);
    expect(({} as Record<string, unknown>).x).toBeUndefined();
    for (const bad of [
      '{"x":null}',
      '{"x":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}',
      '{"x":{"dtype":"U8","shape":[1],"data_offsets":[2,1]}}',
      '{"__metadata__":{"a":1}}',
    ]) {
      expect(() => parseSafetensorsHeader(header(bad)), bad).toThrow(expect.objectContaining({ code: "corrupt" }));
    }
  });
});
