import type { CRC32CValidator, File } from "@google-cloud/storage";
import type { ProgressDeadline, ReadTarget } from "@cairn/core/storage";
import { type GcsErrorSite, damagedBody, httpStatus, toCheckpointError } from "./gcs-errors.js";
import { type SdkResponse, announcedCrc32c, announcedRange, nativeCrc32cValidator } from "./gcs-integrity.js";

/**
 * One GET of the object, or of bytes `[start, end)` of it, handing each chunk of the body to
 * `onChunk` as it arrives, with the response's status. GCS answers a range starting past the
 * end with 416, which is an empty body. A body that ends short of the range its answer
 * announced, or a whole object whose CRC32C differs from `x-goog-hash`, was cut or damaged on
 * the way: a transient error, never a short or wrong result. The adapter checks the hash
 * itself, as the SDK skips it when `x-goog-stored-content-encoding` is absent.
 */
async function download(
  file: File,
  site: GcsErrorSite,
  deadline: ProgressDeadline,
  range: { start: number; end: number } | undefined,
  validation: "crc32c" | false | undefined,
  onChunk: (chunk: Buffer, status: number | undefined) => void,
): Promise<{ size: number | undefined }> {
  const stream = file.createReadStream({
    ...(range ? { start: range.start, end: range.end - 1 } : {}),
    validation: false,
  });
  let status: number | undefined;
  let announced: { start: number; end: number; size: number } | null | undefined;
  let hash: { readonly expected: string; readonly crc: CRC32CValidator } | undefined;
  stream.on("response", (response: SdkResponse) => {
    deadline.touch();
    status = response.statusCode;
    announced = announcedRange(response);
    const expected = range || validation === false ? undefined : announcedCrc32c(response);
    hash = expected === undefined ? undefined : { expected, crc: nativeCrc32cValidator() };
  });
  const onAbort = (): void => void stream.destroy(deadline.signal.reason);
  deadline.signal.addEventListener("abort", onAbort, { once: true });
  let received = 0;
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      deadline.touch();
      received += chunk.byteLength;
      hash?.crc.update(chunk);
      onChunk(chunk, status);
    }
  } catch (error) {
    if (range && httpStatus(error) === 416) return { size: undefined };
    throw toCheckpointError(error, site);
  } finally {
    deadline.signal.removeEventListener("abort", onAbort);
  }
  if (announced === null) throw damagedBody(site, `the answer's Content-Range is missing or malformed`);
  if (
    announced &&
    range &&
    (announced.start !== range.start ||
      (announced.end !== range.end - 1 && announced.end !== announced.size - 1) ||
      announced.end >= range.end)
  ) {
    throw damagedBody(
      site,
      `bytes ${range.start}-${range.end - 1} were asked for and bytes ${announced.start}-${announced.end} announced`,
    );
  }
  if (announced && received < announced.end - announced.start + 1)
    throw damagedBody(site, `the body ended after ${received} of ${announced.end - announced.start + 1} bytes`);
  if (hash && !hash.crc.validate(hash.expected))
    throw damagedBody(
      site,
      `the body's CRC32C (${hash.crc.toString()}) is not the object's (${hash.expected}); ${received} bytes came`,
    );
  // A 200 answer is the whole object (a server that ignored the range).
  return { size: announced ? announced.size : status === 200 ? received : undefined };
}

/** A whole object, of unknown size, gathered in chunks. */
export async function downloadObject(
  file: File,
  site: GcsErrorSite,
  deadline: ProgressDeadline,
  validation: "crc32c" | false | undefined,
): Promise<Uint8Array> {
  const chunks: Buffer[] = [];
  await download(file, site, deadline, undefined, validation, (chunk) => chunks.push(chunk));
  const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * Bytes `[start, end)` of an object, put in place in `target` from offset `at` as they arrive
 * (no second copy to join them); resolves how many there were (fewer at the object's end), and
 * the object's size where the answer told it.
 * Bytes outside the range are dropped: a server that ignores the range sends them (200 with
 * the whole object, as the firebase emulator does for ranges past the end).
 */
export async function downloadRange(
  file: File,
  site: GcsErrorSite,
  deadline: ProgressDeadline,
  start: number,
  end: number,
  target: ReadTarget,
  at: number,
): Promise<{ got: number; size: number | undefined }> {
  let received = 0;
  let skip = 0;
  const { size } = await download(file, site, deadline, { start, end }, undefined, (chunk, status) => {
    skip = status === 200 ? start : 0;
    const from = Math.max(0, skip - received);
    const to = Math.min(chunk.byteLength, skip + end - start - received);
    if (from < to) target.set(chunk.subarray(from, to), at + received + from - skip);
    received += chunk.byteLength;
  });
  return { got: Math.min(end - start, Math.max(0, received - skip)), size };
}
