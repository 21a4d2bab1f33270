// Bytes as base64 or hex text, Node's side: Buffer's native code (the browser build gets
// byte-text.browser.ts).

export function bytesToBase64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
}

/** The bytes of base64 `text` (which the caller has checked is base64). */
export function base64ToBytes(text: string): Uint8Array {
  return Buffer.from(text, "base64");
}

export function bytesToHex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("hex");
}

/** The bytes of hex `text`, up to its first character that is not a hex digit pair (as Buffer reads it). */
export function hexToBytes(text: string): Uint8Array {
  return Buffer.from(text, "hex");
}
