// CRC32C in a small hand-built WebAssembly function (slicing by 16, as crc32c-js.ts): about 1.6×
// the JavaScript's speed (docs/benchmarks.md), for Web Workers made from a string, which cannot
// import hash-wasm. WebAssembly has no CRC instruction; tables are all it can use.

/** Bytes of memory before the data: the 16 tables of 256 words. */
const TABLES = 16 * 1024;

/**
 * The module: `crc(at, length, crc)` over memory `[TABLES + at, TABLES + at + length)` with the
 * tables at 0, returning the raw register (`crc` and the result without the final inversion
 * done here: both inverted inside). Exports `crc` and `memory` (one page to start).
 */
function moduleBytes(): Uint8Array {
  const leb = (n: number): number[] => {
    const out: number[] = [];
    do {
      out.push((n & 0x7f) | (n >>> 7 ? 0x80 : 0));
      n >>>= 7;
    } while (n);
    return out;
  };
  const [AT, LENGTH, C, A, B, D, E] = [0, 1, 2, 3, 4, 5, 6];
  const get = (i: number): number[] => [0x20, i];
  const set = (i: number): number[] => [0x21, i];
  // i32.const: a signed LEB128.
  const k = (n: number): number[] => {
    const out = [0x41];
    for (;;) {
      const low = n & 0x7f;
      n >>= 7;
      if ((n === 0 && !(low & 0x40)) || (n === -1 && low & 0x40)) return [...out, low];
      out.push(low | 0x80);
    }
  };
  const load = (offset: number): number[] => [0x28, 2, ...leb(offset)];
  const [XOR, AND, SHR_U, SHL, ADD, SUB, LT_U, EQZ] = [0x73, 0x71, 0x76, 0x74, 0x6a, 0x6b, 0x49, 0x45];
  // Table t's entry for byte (w >>> s) & 0xff.
  const look = (w: number, s: number, t: number): number[] => [
    ...get(w),
    ...(s ? [...k(s), SHR_U] : []),
    ...(s === 24 ? [] : [...k(0xff), AND]),
    ...k(2),
    SHL,
    ...load(t * 1024),
  ];
  const word = (w: number, at: number): number[] => [...get(AT), ...load(TABLES + at), ...set(w)];
  const xorAll = (parts: number[][]): number[] => parts.flatMap((p, i) => (i === 0 ? p : [...p, XOR]));
  const body = [
    ...[...get(C), ...k(-1), XOR, ...set(C)],
    // while (length >= 16): four words, sixteen lookups.
    ...[0x02, 0x40, 0x03, 0x40, ...get(LENGTH), ...k(16), LT_U, 0x0d, 1],
    ...[...get(AT), ...load(TABLES), ...get(C), XOR, ...set(A), ...word(B, 4), ...word(D, 8), ...word(E, 12)],
    ...xorAll([A, B, D, E].flatMap((w, i) => [0, 8, 16, 24].map((s, j) => look(w, s, 15 - 4 * i - j)))),
    ...set(C),
    ...[...get(AT), ...k(16), ADD, ...set(AT), ...get(LENGTH), ...k(16), SUB, ...set(LENGTH)],
    ...[0x0c, 0, 0x0b, 0x0b],
    // while (length > 0): one byte.
    ...[0x02, 0x40, 0x03, 0x40, ...get(LENGTH), EQZ, 0x0d, 1],
    ...[...get(C), ...get(AT), 0x2d, 0, ...leb(TABLES), XOR, ...k(0xff), AND, ...k(2), SHL, ...load(0)],
    ...[...get(C), ...k(8), SHR_U, XOR, ...set(C)],
    ...[...get(AT), ...k(1), ADD, ...set(AT), ...get(LENGTH), ...k(1), SUB, ...set(LENGTH)],
    ...[0x0c, 0, 0x0b, 0x0b],
    ...[...get(C), ...k(-1), XOR, 0x0b],
  ];
  const code = [1, 4, 0x7f, ...body]; // locals: four i32
  const section = (id: number, bytes: number[]): number[] => [id, ...leb(bytes.length), ...bytes];
  const name = (s: string): number[] => [s.length, ...[...s].map((c) => c.charCodeAt(0))];
  return new Uint8Array([
    ...[0x00, 0x61, 0x73, 0x6d, 1, 0, 0, 0],
    ...section(1, [1, 0x60, 3, 0x7f, 0x7f, 0x7f, 1, 0x7f]), // (i32, i32, i32) -> i32
    ...section(3, [1, 0]),
    ...section(5, [1, 0, 1]),
    ...section(7, [2, ...name("crc"), 0, 0, ...name("memory"), 2, 0]),
    ...section(10, [1, ...leb(code.length), ...code]),
  ]);
}

/** The module's bytes, as `makeCrc32cWasm` takes them. */
export const CRC32C_WASM_BYTES: Uint8Array = moduleBytes();

/**
 * Makes CRC32C from `CRC32C_WASM_BYTES` and `makeCrc32cTables`' tables, continuing from `initial`; undefined where WebAssembly
 * cannot be compiled (none, or a CSP without 'wasm-unsafe-eval'). Bytes are copied into the
 * module's memory 1 MiB at a time. Self-contained, with no nested named function, so the text
 * `CRC32C_WASM_SOURCE` makes the same function in a Web Worker.
 */
export function makeCrc32cWasm(
  bytes: Uint8Array,
  t: Int32Array,
): ((bytes: Uint8Array, initial?: number) => number) | undefined {
  const tables = 16 * 1024;
  const slice = 1 << 20;
  let exports: { crc(at: number, length: number, crc: number): number; memory: WebAssembly.Memory };
  try {
    exports = new WebAssembly.Instance(new WebAssembly.Module(bytes as Uint8Array<ArrayBuffer>))
      .exports as typeof exports;
    exports.memory.grow(Math.ceil((tables + slice) / 65536));
  } catch {
    return undefined;
  }
  new Int32Array(exports.memory.buffer, 0, 16 * 256).set(t);
  const heap = new Uint8Array(exports.memory.buffer, tables, slice);
  const crc = exports.crc;
  return function (data: Uint8Array, initial = 0): number {
    let c = initial;
    for (let at = 0; at < data.byteLength; at += slice) {
      const part = data.subarray(at, at + slice);
      heap.set(part);
      c = crc(0, part.byteLength, c);
    }
    return c >>> 0;
  };
}

/** `makeCrc32cWasm`'s source text: `(${CRC32C_WASM_SOURCE})(bytes, tables)` is the same function in any realm. */
export const CRC32C_WASM_SOURCE: string = makeCrc32cWasm.toString();
