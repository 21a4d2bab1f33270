/** CRC32C's reversed polynomial (Castagnoli). */
const POLYNOMIAL = 0x82f63b78;

/** a·b modulo the polynomial, both in CRC32C's reflected bit order (zlib's `multmodp`). */
function multiplyModP(a: number, b: number): number {
  let product = 0;
  for (let m = 0x80000000; a !== 0 && m !== 0; m >>>= 1) {
    if (a & m) {
      product ^= b;
      if ((a & (m - 1)) === 0) break;
    }
    b = b & 1 ? (b >>> 1) ^ POLYNOMIAL : b >>> 1;
  }
  return product >>> 0;
}

/**
 * x^(2^k) modulo the polynomial, for k = 0..63 (zlib's `x2n_table`, which wraps at 32: right
 * for CRC-32, whose powers repeat every 32 squarings, wrong for CRC-32C's, which repeat every 31).
 */
const X2N: number[] = [0x40000000];
for (let k = 1; k < 64; k++) X2N.push(multiplyModP(X2N[k - 1]!, X2N[k - 1]!));

/** x^(8·bytes) modulo the polynomial: the factor that moves a CRC past `bytes` more bytes. */
function shiftFactor(bytes: number): number {
  let factor = 0x80000000;
  // Bytes, not bits: start at x^(2^3). Lengths are safe integers, so divide rather than shift.
  for (let n = bytes, k = 3; n > 0; n = Math.floor(n / 2), k++) {
    if (n % 2 === 1) factor = multiplyModP(X2N[k]!, factor);
  }
  return factor;
}

/**
 * The CRC32C of A followed by B, from `crcA`, `crcB` and B's length (zlib's `crc32_combine`):
 * CRC32C is linear, so a run of blocks checks against its blocks' stored sums without reading it twice.
 */
export function crc32cCombine(crcA: number, crcB: number, lengthB: number): number {
  return (multiplyModP(shiftFactor(lengthB), crcA) ^ crcB) >>> 0;
}

/**
 * `crc32cCombine` for one fixed length of B, as four byte tables: a block costs four look-ups
 * instead of a multiplication, so a million 1 KiB blocks combine in a few milliseconds.
 */
export function crc32cCombiner(lengthB: number): (crcA: number, crcB: number) => number {
  const factor = shiftFactor(lengthB);
  const tables = [0, 1, 2, 3].map((byte) => {
    const table = new Uint32Array(256);
    for (let v = 0; v < 256; v++) table[v] = multiplyModP(factor, (v << (8 * byte)) >>> 0);
    return table;
  });
  const [t0, t1, t2, t3] = tables as [Uint32Array, Uint32Array, Uint32Array, Uint32Array];
  return (crcA, crcB) =>
    (t0[crcA & 0xff]! ^ t1[(crcA >>> 8) & 0xff]! ^ t2[(crcA >>> 16) & 0xff]! ^ t3[crcA >>> 24]! ^ crcB) >>> 0;
}
