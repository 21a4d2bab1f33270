// Bytes as base64 or hex text in a browser: btoa/atob over binary strings, hex by table.

/** Bytes per String.fromCharCode call: well below engines' argument limits. */
const PIECE = 0x8000;

export function bytesToBase64(bytes: Uint8Array): string {
  let binary = "";
  for (let at = 0; at < bytes.length; at += PIECE) {
    // eslint-disable-next-line no-restricted-syntax -- PIECE bounds the arguments
    binary += String.fromCharCode(...bytes.subarray(at, at + PIECE));
  }
  return btoa(binary);
}

export function base64ToBytes(text: string): Uint8Array {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

export function bytesToHex(bytes: Uint8Array): string {
  let hex = "";
  for (const byte of bytes) hex += HEX[byte]!;
  return hex;
}

export function hexToBytes(text: string): Uint8Array {
  const bytes = new Uint8Array(text.length >> 1);
  let n = 0;
  for (; n < bytes.length; n++) {
    const value = Number.parseInt(text.slice(2 * n, 2 * n + 2), 16);
    if (!/^[0-9a-fA-F]{2}$/.test(text.slice(2 * n, 2 * n + 2)) || Number.isNaN(value)) break;
    bytes[n] = value;
  }
  return bytes.subarray(0, n);
}
