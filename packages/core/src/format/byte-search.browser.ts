// Finding a byte in bytes in a browser: the typed array's own indexOf.

/** The first index of `byte` in `bytes[from, to)`, or -1. */
export function indexOfByte(bytes: Uint8Array, byte: number, from: number, to: number): number {
  if (from >= to) return -1;
  return bytes.subarray(0, to).indexOf(byte, from);
}
