import { createHash } from "node:crypto";
import { type CompletedPart, HeadObjectCommand, type HeadObjectCommandOutput, type S3Client } from "@aws-sdk/client-s3";
import { crc32c } from "@cairn/core/format";
import { type S3CallContext, crc32cBase64, s3Call } from "./s3-call.js";

// A write whose answer was lost may have taken effect, and its retry is then refused
// (NoSuchUpload, 412): these ask the stored object whether it is that write's.

/**
 * Whether the object at `key` holds exactly `bytes`, as a PutObject of them stored it: its size,
 * and its CRC32C or its ETag (the MD5 of a single-part object) where the server keeps them.
 * Size alone proves nothing here, so a server that keeps neither gets a no.
 */
export async function isOwnPut(
  client: S3Client,
  context: S3CallContext,
  site: { key: string; path: string },
  bytes: Uint8Array,
  checksum: string | undefined,
): Promise<boolean> {
  const head = await headOf(client, context, site);
  if (head?.ContentLength !== bytes.byteLength) return false;
  if (checksum !== undefined && head.ChecksumCRC32C !== undefined) return head.ChecksumCRC32C === checksum;
  const etag = /^"?([0-9a-f]{32})"?$/i.exec(head.ETag ?? "")?.[1];
  return etag !== undefined && etag.toLowerCase() === createHash("md5").update(bytes).digest("hex");
}

/**
 * Whether the object at the upload's key is what completing this upload stored: its size is
 * the parts' total, and the multipart ETag (MD5 of the parts' MD5s, "-N") and composite
 * CRC32C, where the server keeps them, are the ones the parts give. Size alone (s3rver keeps
 * neither) is enough for an overwrite, which another writer could replace anyway, but not for
 * `ifAbsent`, which must never claim another writer's object. A failed HEAD is a no.
 */
export async function isOwnUpload(
  client: S3Client,
  context: S3CallContext,
  upload: { key: string; path: string },
  parts: readonly CompletedPart[],
  total: number,
  ifAbsent: boolean,
): Promise<boolean> {
  const head = await headOf(client, context, upload);
  if (head?.ContentLength !== total) return false;
  let proven = false;
  const etag = /^"?([0-9a-f]{32})-(\d+)"?$/i.exec(head.ETag ?? "");
  if (etag) {
    if (etag[1]!.toLowerCase() !== multipartETag(parts) || Number(etag[2]) !== parts.length) return false;
    proven = true;
  }
  if (head.ChecksumCRC32C?.includes("-")) {
    if (head.ChecksumCRC32C !== compositeCrc32c(parts)) return false;
    proven = true;
  }
  return proven || !ifAbsent;
}

/** S3's ETag of a multipart object: the MD5 of the parts' binary MD5s (undefined when a part's ETag is no MD5). */
function multipartETag(parts: readonly CompletedPart[]): string | undefined {
  const md5 = createHash("md5");
  for (const part of parts) {
    const hex = /^"?([0-9a-f]{32})"?$/i.exec(part.ETag ?? "")?.[1];
    if (hex === undefined) return undefined;
    md5.update(Buffer.from(hex, "hex"));
  }
  return md5.digest("hex");
}

/** S3's composite CRC32C of a multipart object: the CRC32C of the parts' big-endian CRC32Cs, "-N". */
function compositeCrc32c(parts: readonly CompletedPart[]): string | undefined {
  const joined = Buffer.alloc(4 * parts.length);
  for (const [i, part] of parts.entries()) {
    if (part.ChecksumCRC32C === undefined) return undefined;
    const value = Buffer.from(part.ChecksumCRC32C, "base64");
    if (value.byteLength !== 4) return undefined;
    value.copy(joined, 4 * i);
  }
  return `${crc32cBase64(crc32c(joined))}-${parts.length}`;
}

/** The object's HEAD with its checksums, or undefined when it is missing or cannot be asked. */
async function headOf(
  client: S3Client,
  context: S3CallContext,
  site: { key: string; path: string },
): Promise<HeadObjectCommandOutput | undefined> {
  try {
    return await s3Call(context, { op: "checking", key: site.key, path: site.path }, ({ signal }) =>
      client.send(new HeadObjectCommand({ Bucket: context.bucket, Key: site.key, ChecksumMode: "ENABLED" }), {
        abortSignal: signal,
      }),
    );
  } catch {
    return undefined;
  }
}
