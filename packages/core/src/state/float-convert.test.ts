import { describe, expect, it } from "vitest";
import { convertFloats } from "./float-convert.js";

const u16 = (values: readonly number[]): Uint8Array => new Uint8Array(Uint16Array.from(values).buffer);
const f32bits = (values: readonly number[]): Uint8Array => new Uint8Array(Uint32Array.from(values).buffer);
const bitsOf16 = (bytes: Uint8Array): number[] => [
  ...new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 2),
];

/** Round half to even of a non-negative real. */
function roundEven(x: number): number {
  const floor = Math.floor(x);
  const rest = x - floor;
  return rest > 0.5 || (rest === 0.5 && floor % 2 === 1) ? floor + 1 : floor;
}

/** The nearest half (ties to even) of a float32 value, written from the IEEE definition: the reference. */
function referenceHalf(value: number): number {
  if (Number.isNaN(value)) return 0x7e00;
  const sign = value < 0 || Object.is(value, -0) ? 0x8000 : 0;
  const a = Math.abs(value);
  if (a >= 65520) return sign | 0x7c00;
  if (a < 2 ** -14) return sign | roundEven(a / 2 ** -24);
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  if (2 ** (e + 1) <= a) e++;
  let m = roundEven((a / 2 ** e - 1) * 1024);
  if (m === 1024) {
    e++;
    m = 0;
  }
  return sign | ((e + 15) << 10) | m;
}

/** Deterministic 32-bit values. */
function* randomBits(n: number): Generator<number> {
  let x = 2463534242;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    yield x >>> 0;
  }
}

describe("convertFloats", () => {
  it("rounds float32 to bfloat16 to nearest even, NaN to 0x7FC0, overflow to infinity", () => {
    const out = convertFloats(
      f32bits([
        0x3f800000, 0x3f808000, 0x3f818000, 0x3f80ffff, 0x7fc00001, 0xffc00000, 0xff800000, 0x7f7fffff, 0x80000000,
      ]),
      "float32",
      "bfloat16",
    );
    expect(bitsOf16(out)).toEqual([0x3f80, 0x3f80, 0x3f82, 0x3f81, 0x7fc0, 0x7fc0, 0xff80, 0x7f80, 0x8000]);
  });

  it("rounds float32 to float16 as the IEEE definition says, for edge values and 200k random bit patterns", () => {
    const edges = [
      0,
      -0,
      1,
      -1,
      65504,
      65519.99,
      65520,
      1e9,
      -Infinity,
      2 ** -24,
      2 ** -25,
      3 * 2 ** -26,
      2 ** -14,
      2 ** -14 - 2 ** -25,
      1 + 2 ** -11,
      1 + 3 * 2 ** -11,
      0.1,
      1 / 3,
      2 ** -30,
    ].map(Math.fround);
    const values = new Float32Array([
      ...edges,
      ...[...randomBits(200_000)].map((bits) => new Float32Array(new Uint32Array([bits]).buffer)[0]!),
    ]);
    const out = bitsOf16(convertFloats(new Uint8Array(values.buffer), "float32", "float16"));
    const expected = [...values].map(referenceHalf);
    const wrong = out.findIndex(
      (bits, i) => bits !== (Number.isNaN(values[i]) ? (bits & 0x8000) | 0x7e00 : expected[i]),
    );
    expect(
      wrong,
      wrong >= 0 ? `${values[wrong]}: ${out[wrong]!.toString(16)} != ${expected[wrong]!.toString(16)}` : "",
    ).toBe(-1);
  });

  it("widens exactly: every float16 and bfloat16 bit pattern goes to float32 and back unchanged (NaNs to the quiet NaN)", () => {
    const all = Array.from({ length: 65536 }, (_, i) => i);
    const isHalfNaN = (b: number): boolean => (b & 0x7c00) === 0x7c00 && (b & 0x3ff) !== 0;
    const half = bitsOf16(convertFloats(convertFloats(u16(all), "float16", "float32"), "float32", "float16"));
    expect(half).toEqual(all.map((b) => (isHalfNaN(b) ? (b & 0x8000) | 0x7e00 : b)));
    const isBfNaN = (b: number): boolean => (b & 0x7f80) === 0x7f80 && (b & 0x7f) !== 0;
    const bf = bitsOf16(convertFloats(convertFloats(u16(all), "bfloat16", "float64"), "float64", "bfloat16"));
    expect(bf).toEqual(all.map((b) => (isBfNaN(b) ? 0x7fc0 : b)));
  });

  it("narrows float64 through float32, as torch does, and refuses a dtype that is not floating", () => {
    const doubles = new Float64Array([1 + 2 ** -30, 1e300, -2.5, NaN]);
    const out = new Float32Array(convertFloats(new Uint8Array(doubles.buffer), "float64", "float32").buffer);
    expect([...out]).toEqual([1, Infinity, -2.5, NaN]);
    expect(() => convertFloats(new Uint8Array(4), "int32", "float32")).toThrow(/not int32/);
    expect(() => convertFloats(new Uint8Array(4), "float32", "int32")).toThrow(/not int32/);
  });
});
