/** A partial answer's body: bytes `start` to `end` (inclusive) of an object of `size` bytes. */
export interface ContentRange {
  readonly start: number;
  readonly end: number;
  readonly size: number;
}

/**
 * What `Content-Range: bytes a-b/size` says, when it makes sense: undefined for a header that is
 * missing, malformed (`*` included) or impossible, an answer not to trust. An empty object may
 * answer `bytes 0-0/0` (s3rver); otherwise the range lies inside the object.
 */
export function parseContentRange(header: string | undefined): ContentRange | undefined {
  const match = /^bytes (\d{1,16})-(\d{1,16})\/(\d{1,16})\s*$/.exec(header ?? "");
  if (!match) return undefined;
  const [start, end, size] = [Number(match[1]), Number(match[2]), Number(match[3])];
  if (!Number.isSafeInteger(size) || start > size) return undefined;
  return size === 0 || (start <= end && end < size) ? { start, end, size } : undefined;
}
