import { crc32c } from "./crc32c.js";
import { CheckpointError, describeValue } from "../errors.js";
import { type CheckpointMetadata, FORMAT_MAJOR, FORMAT_NAME, METADATA_FILE } from "./metadata.js";
import { corrupt, isCount, isRecord, refuseForbiddenKeys } from "./metadata-checks.js";
import { decodeV1 } from "./metadata-v1.js";
import { CONTENT_HASHES, writeV2 } from "./metadata-v2.js";
import { decodeV2 } from "./metadata-v2-decode.js";
import { JsonBytes } from "./json-bytes.js";
import { JsonEncodingError, JsonReader, JsonSyntaxError } from "./json-reader.js";

/**
 * `metadata.json` opens with `{"metadataCrc32c":<n>,`: the CRC32C of the file's bytes without that
 * field, that is `{` followed by everything after the prefix. Raw bytes, so any reader can check it
 * without re-encoding JSON the way JavaScript does.
 */
const CHECKSUM_FIELD = "metadataCrc32c";
/** Room for `{"metadataCrc32c":<up to 10 digits>,` before the body. */
const HEAD_ROOM = CHECKSUM_FIELD.length + 14;
const CHECKSUM_OPENING = new TextEncoder().encode(`{"${CHECKSUM_FIELD}":`);
const OPEN_BRACE_CRC = crc32c(new Uint8Array([0x7b]));

/**
 * The bytes of `metadata.json` for `metadata`, in this version's layout (`FORMAT_MAJOR`.x):
 * compact JSON opened by its checksum (a stale one in `metadata` is dropped). Throws
 * `invalid_argument` for another major version or a chunk in a file `files` does not list. The
 * bytes are a view (its byteOffset may not be 0) of memory no one else holds.
 * `contentHashes`: every chunk's content hash as its 16 bytes, in the order the entries list the
 * chunks, when the caller has them so (a save's checksum workers): written instead of each chunk's
 * `hash`, which is then neither parsed nor needed (a save's chunks have none).
 */
export function encodeMetadata(metadata: CheckpointMetadata, contentHashes?: Uint8Array): Uint8Array {
  const {
    [CHECKSUM_FIELD]: _stale,
    [CONTENT_HASHES]: _table,
    files,
    entries,
    ...rest
  } = metadata as CheckpointMetadata & { [CHECKSUM_FIELD]?: unknown; [CONTENT_HASHES]?: unknown };
  if (majorOf(metadata.version) !== FORMAT_MAJOR) {
    throw new CheckpointError(
      "invalid_argument",
      `encodeMetadata writes format ${FORMAT_MAJOR}.x, not version ${JSON.stringify(metadata.version)}`,
    );
  }
  // The other fields as JSON.stringify writes them, then files and entries last, as `{ ...rest, files, entries }` would be.
  const others = JSON.stringify(rest);
  // The body goes after room for the checksum field, which then takes the place of its "{": no copy.
  // About 112 bytes an entry (its key's new part, shape, a chunk and its content hash): growing copies.
  const body = new JsonBytes(HEAD_ROOM + 128 + others.length + 112 * entries.length, HEAD_ROOM);
  body.text(others.slice(0, -1));
  if (others !== "{}") body.byte(0x2c);
  writeV2(body, files, entries, metadata.checksum.blockSize, contentHashes);
  body.byte(0x7d);
  const head = `{"${CHECKSUM_FIELD}":${crc32c(body.view(HEAD_ROOM))},`;
  const start = HEAD_ROOM + 1 - head.length;
  body.overwrite(start, head);
  const bytes = body.view(start);
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function majorOf(version: unknown): number | undefined {
  const match = typeof version === "string" ? /^(\d+)\.(\d+)$/.exec(version) : null;
  return match ? Number(match[1]) : undefined;
}

/**
 * Checks the checksum `metadata.json` opens with (`{"metadataCrc32c":` and 1 to 10 digits), if it
 * has one; says whether it had one. The bytes are left as they are: a caller may parse them again.
 */
function verifyChecksum(bytes: Uint8Array, where: string): boolean {
  if (bytes.byteLength < CHECKSUM_OPENING.byteLength) return false;
  for (let i = 0; i < CHECKSUM_OPENING.byteLength; i++) if (bytes[i] !== CHECKSUM_OPENING[i]) return false;
  let at = CHECKSUM_OPENING.byteLength;
  let value = 0;
  while (at < bytes.byteLength && at - CHECKSUM_OPENING.byteLength < 11 && bytes[at]! >= 0x30 && bytes[at]! <= 0x39)
    value = value * 10 + bytes[at++]! - 0x30;
  const digits = at - CHECKSUM_OPENING.byteLength;
  if (digits === 0 || digits > 10 || bytes[at] !== 0x2c) return false;
  // The body is "{" followed by everything after the comma.
  if (crc32c(bytes.subarray(at + 1), OPEN_BRACE_CRC) !== value)
    throw corrupt(where, `its bytes do not match their checksum (${CHECKSUM_FIELD}): it was changed or damaged`);
  return true;
}

/**
 * The top-level fields of `metadata.json`, each parsed but `entries`, which is only passed over
 * and left to its version's decoder (at `entries`, a reader at its value). A repeated field counts
 * once, its last value, as with JSON.parse.
 */
function topLevelFields(bytes: Uint8Array, where: string): { raw: Record<string, unknown>; entries?: number } {
  // A byte-order mark is passed over, as TextDecoder would.
  const reader = new JsonReader(bytes, bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf ? 3 : 0);
  if (reader.peek() !== 0x7b) {
    reader.value();
    reader.finish();
    throw corrupt(where, `not a ${FORMAT_NAME} metadata file`);
  }
  const raw = Object.create(null) as Record<string, unknown>;
  let entries: number | undefined;
  if (!reader.open(0x7b)) {
    do {
      const key = reader.string();
      reader.expect(0x3a);
      if (key === "entries") {
        reader.peek();
        entries = reader.position;
        reader.skip();
        // Holds the field's place among the others; the decoder fills it.
        raw.entries = undefined;
      } else {
        raw[key] = reader.value();
      }
    } while (reader.more(0x7d));
  }
  reader.finish();
  return entries === undefined ? { raw } : { raw, entries };
}

/** How `parseMetadata` reads. */
export interface ParseOptions {
  /**
   * Decode the block CRC32Cs of a chunk with many (`LAZY_CHECKSUMS_MIN`) when asked, not while
   * parsing: all of them when its `crc32c` is first read, those of the blocks a load checks as it
   * checks them (`storedChecksums`), so a rank loading its share decodes only those. Their count
   * and the JSON around them are checked while parsing, their base64 as decoded: a forged string
   * throws `corrupt` there, before anything is checked against it.
   */
  readonly lazyChecksums?: boolean;
}

/**
 * Parses and checks `metadata.json` of format 1.x or 2.x into one in-memory shape. A newer
 * major version is `unsupported_version`; anything malformed is `corrupt`, so a reader never
 * acts on half-understood metadata. `bytes` are not changed, nor held.
 */
export function parseMetadata(bytes: Uint8Array, where: string, options: ParseOptions = {}): CheckpointMetadata {
  return parseChecked(bytes, where, true, options.lazyChecksums === true);
}

/** `parseMetadata` reading every entry with the general decoder: the reference its fast path is tested against. */
export function parseMetadataGenerally(
  bytes: Uint8Array,
  where: string,
  options: ParseOptions = {},
): CheckpointMetadata {
  return parseChecked(bytes, where, false, options.lazyChecksums === true);
}

function parseChecked(bytes: Uint8Array, where: string, wholeTensors: boolean, lazy: boolean): CheckpointMetadata {
  if (!(bytes instanceof Uint8Array)) {
    throw new CheckpointError(
      "invalid_argument",
      `parseMetadata: pass the bytes of ${METADATA_FILE} as a Uint8Array, not ${describeValue(bytes)}`,
    );
  }
  try {
    return parseFields(bytes, where, wholeTensors, lazy);
  } catch (cause) {
    const problem =
      cause instanceof JsonEncodingError ? "not valid UTF-8" : cause instanceof JsonSyntaxError ? "not valid JSON" : "";
    if (!problem) throw cause;
    throw new CheckpointError("corrupt", `${where}: ${problem}; the checkpoint cannot be read`, {
      cause,
      context: { path: where },
    });
  }
}

function parseFields(bytes: Uint8Array, where: string, wholeTensors: boolean, lazy: boolean): CheckpointMetadata {
  const checked = verifyChecksum(bytes, where);
  const { raw, entries } = topLevelFields(bytes, where);
  if (raw.format !== FORMAT_NAME) throw corrupt(where, `not a ${FORMAT_NAME} metadata file`);
  const version = typeof raw.version === "string" ? /^(\d+)\.(\d+)$/.exec(raw.version) : null;
  if (!version) throw corrupt(where, `version ${JSON.stringify(raw.version)} is not "major.minor"`);
  const major = Number(version[1]);
  if (major > FORMAT_MAJOR) {
    throw new CheckpointError(
      "unsupported_version",
      `${where}: format version ${raw.version as string} is newer than this Cairn reads (${FORMAT_MAJOR}.x); upgrade @cairn/core`,
      { context: { path: where } },
    );
  }
  if (!checked && (major >= 2 || Number(version[2]) >= 1 || Object.hasOwn(raw, CHECKSUM_FIELD))) {
    throw corrupt(
      where,
      `version ${raw.version as string} must open with its checksum ${CHECKSUM_FIELD}, and does not`,
    );
  }
  // 1.x entries are objects, parsed and searched with the rest; 2.x entries are arrays, checked field by field.
  const reader = entries === undefined ? undefined : new JsonReader(bytes, entries);
  if (major < 2 && reader) raw.entries = reader.value();
  refuseForbiddenKeys(raw, where);
  delete raw[CHECKSUM_FIELD];
  const checksum = raw.checksum;
  if (
    !isRecord(checksum) ||
    checksum.algorithm !== "crc32c" ||
    !isCount(checksum.blockSize) ||
    checksum.blockSize === 0
  ) {
    throw corrupt(where, 'checksum must be { algorithm: "crc32c", blockSize > 0 }');
  }
  if (!isCount(raw.worldSize) || raw.worldSize === 0) throw corrupt(where, "worldSize must be a positive integer");
  if (raw.user !== undefined && !isRecord(raw.user)) throw corrupt(where, "user must be an object");
  const { files, entries: decoded } =
    major >= 2
      ? decodeV2(raw, reader, bytes, checksum.blockSize, where, wholeTensors, lazy)
      : decodeV1(raw, checksum.blockSize, where);
  // Held by the chunks now (`ChunkMetadata.hash`); the table is written again from them.
  delete raw[CONTENT_HASHES];
  return {
    ...(raw as unknown as CheckpointMetadata),
    files,
    entries: decoded,
    user: (raw.user as Record<string, unknown> | undefined) ?? {},
  };
}
