import { crc32c } from "@cairn/core/format";
import { type ContentRange, parseContentRange } from "@cairn/core/storage";
import type { CRC32CValidator } from "@google-cloud/storage";

// How the adapter knows a body arrived whole and unchanged: CRC32C on core's native code, and
// what a download's answer announces about its body.

/**
 * CRC32C on core's native code, for the SDK's upload validation (its `crc32cGenerator` hook) and
 * the adapter's check of whole-object downloads (`validation: "crc32c"`), in place of the SDK's
 * byte-at-a-time JavaScript validator, which runs on every byte of every upload. Same checksum, same checks: the
 * SDK compares `toString()`/`validate()` with the hash the server reports after each upload, so a
 * wrong value here fails every write.
 */
export function nativeCrc32cValidator(): CRC32CValidator {
  let value = 0;
  const encoded = (): string => {
    const bytes = Buffer.alloc(4);
    bytes.writeUInt32BE(value >>> 0);
    return bytes.toString("base64");
  };
  return {
    update: (data) => {
      value = crc32c(data, value);
    },
    toString: encoded,
    validate: (expected) => expected === encoded(),
  };
}

/** What the SDK's read stream reports in its "response" event: node-fetch's status and headers, as a plain object. */
export interface SdkResponse {
  readonly statusCode?: number;
  readonly headers?: Readonly<Record<string, string | undefined>>;
}

/**
 * What a partial answer (206) says its body is, from `Content-Range: bytes a-b/size`: bytes
 * `[start, end]` of an object of `size` bytes; null when the header is missing, malformed or
 * impossible (an answer not to trust). A body that ends cleanly with fewer bytes (a middlebox
 * that cut it) is caught by it; one cut mid-`Content-Length` never ends, which the progress deadline catches.
 */
export function announcedRange(response: SdkResponse): ContentRange | null | undefined {
  if (response.statusCode !== 206) return undefined;
  return parseContentRange(response.headers?.["content-range"]) ?? null;
}

/** The object's CRC32C from `x-goog-hash`, when the body is the stored bytes as they are (not gzip to be inflated). */
export function announcedCrc32c(response: SdkResponse): string | undefined {
  const encoding = response.headers?.["content-encoding"];
  if (encoding !== undefined && encoding !== "" && encoding !== "identity") return undefined;
  return /(?:^|,)\s*crc32c=([A-Za-z0-9+/=]+)/.exec(response.headers?.["x-goog-hash"] ?? "")?.[1];
}
