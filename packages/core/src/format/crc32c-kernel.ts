// CRC32C's fastest code on this platform, Node's side: @node-rs/crc32's SSE4.2/ARMv8 instructions.
// Imported as "#platform/format/crc32c-kernel.js"; the browser build gets crc32c-kernel.browser.ts.
import { crc32c as nativeCrc32c } from "@node-rs/crc32";

export const CRC32C_IMPLEMENTATION: "native" | "portable" = "native";

export function crc32cKernel(bytes: Uint8Array, initial: number): number {
  return nativeCrc32c(bytes as Buffer, initial) >>> 0;
}
