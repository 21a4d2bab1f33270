// CRC32C in plain JavaScript: the fallback before WebAssembly loads, and the code a Web Worker made
// from a string runs (no import here, so importing it costs nothing where native CRC32C is used).

/**
 * The 16 tables of slicing by 16 (table k maps a byte to its CRC shifted through k more zero
 * bytes), as the JavaScript and WebAssembly CRC32C use them. Self-contained, so the text
 * `CRC32C_TABLES_SOURCE` makes the same tables in a Web Worker.
 */
export function makeCrc32cTables(): Int32Array {
  // 0x82f63b78 is Castagnoli's reversed polynomial.
  const t = new Int32Array(16 * 256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[n] = c;
  }
  for (let n = 0; n < 256; n++) {
    let c = t[n]!;
    for (let k = 1; k < 16; k++) {
      c = t[c & 0xff]! ^ (c >>> 8);
      t[k * 256 + n] = c;
    }
  }
  return t;
}

/**
 * Makes CRC32C in plain JavaScript (slicing by 16, four 32-bit words at a time) from
 * `makeCrc32cTables`' tables, continuing from `initial`: about 0.8× WebAssembly's speed
 * (docs/benchmarks.md). Self-contained, with no nested named function, so the text
 * `CRC32C_JS_SOURCE` makes the same function in a Web Worker.
 */
export function makeCrc32cJs(t: Int32Array): (bytes: Uint8Array, initial?: number) => number {
  // Words are read in the host's byte order: little-endian everywhere JavaScript runs, else bytewise.
  const littleEndian = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
  return function (bytes: Uint8Array, initial = 0): number {
    let c = ~initial;
    let i = 0;
    const n = bytes.length;
    if (littleEndian) {
      for (; i < n && (bytes.byteOffset + i) & 3; i++) c = t[(c ^ bytes[i]!) & 0xff]! ^ (c >>> 8);
      // Whole 16-byte groups only, so the view starts aligned: input that ends before a 4-byte boundary has none.
      const count = ((n - i) >>> 4) << 2;
      if (count > 0) {
        const words = new Int32Array(bytes.buffer, bytes.byteOffset + i, count);
        for (let w = 0; w < words.length; w += 4) {
          const a = words[w]! ^ c;
          const b = words[w + 1]!;
          const d = words[w + 2]!;
          const e = words[w + 3]!;
          c =
            t[3840 + (a & 0xff)]! ^
            t[3584 + ((a >>> 8) & 0xff)]! ^
            t[3328 + ((a >>> 16) & 0xff)]! ^
            t[3072 + (a >>> 24)]! ^
            t[2816 + (b & 0xff)]! ^
            t[2560 + ((b >>> 8) & 0xff)]! ^
            t[2304 + ((b >>> 16) & 0xff)]! ^
            t[2048 + (b >>> 24)]! ^
            t[1792 + (d & 0xff)]! ^
            t[1536 + ((d >>> 8) & 0xff)]! ^
            t[1280 + ((d >>> 16) & 0xff)]! ^
            t[1024 + (d >>> 24)]! ^
            t[768 + (e & 0xff)]! ^
            t[512 + ((e >>> 8) & 0xff)]! ^
            t[256 + ((e >>> 16) & 0xff)]! ^
            t[e >>> 24]!;
        }
        i += words.length * 4;
      }
    }
    for (; i < n; i++) c = t[(c ^ bytes[i]!) & 0xff]! ^ (c >>> 8);
    return ~c >>> 0;
  };
}

/** `makeCrc32cTables`' source text: `(${CRC32C_TABLES_SOURCE})()` makes the same tables in any realm. */
export const CRC32C_TABLES_SOURCE: string = makeCrc32cTables.toString();

/** `makeCrc32cJs`'s source text: `(${CRC32C_JS_SOURCE})(tables)` is the same CRC32C in any realm (a Web Worker made from a string). */
export const CRC32C_JS_SOURCE: string = makeCrc32cJs.toString();

/** CRC32C in plain JavaScript, continuing from `initial`: runs anywhere. */
export const crc32cJs: (bytes: Uint8Array, initial?: number) => number = makeCrc32cJs(makeCrc32cTables());
