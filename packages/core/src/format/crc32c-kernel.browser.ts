// CRC32C in a browser: the portable code (WebAssembly once compiled, JavaScript until then).
import { loadPortableCrc32c, portableCrc32c } from "./crc32c-portable.js";

export const CRC32C_IMPLEMENTATION: "native" | "portable" = "portable";

void loadPortableCrc32c();

export const crc32cKernel: (bytes: Uint8Array, initial: number) => number = portableCrc32c;
