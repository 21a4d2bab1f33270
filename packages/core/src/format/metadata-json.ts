import { crc32c } from "./crc32c.js";
import { CheckpointError, describeValue } from "../errors.js";
import { type CheckpointMetadata, FORMAT_MAJOR, FORMAT_NAME, METADATA_FILE } from "./metadata.js";
import { corrupt, isCount, isRecord, refuseForbiddenKeys } from "./metadata-checks.js";
import { decodeV1 } from "./metadata-v1.js";
import { CONTENT_HASHES, decodeV2, writeV2 } from "./metadata-v2.js";
import { JsonBytes } from "./json-bytes.js";

/**
 * `metadata.json` opens with `{"metadataCrc32c":<n>,`: the CRC32C of the file's bytes without that
 * field, that is `{` followed by everything after the prefix. Raw bytes, so any reader can check it
 * without re-encoding JSON the way JavaScript does.
 */
const CHECKSUM_FIELD = "metadataCrc32c";
/** Room for `{"metadataCrc32c":<up to 10 digits>,` before the body. */
const HEAD_ROOM = CHECKSUM_FIELD.length + 14;
const CHECKSUM_PREFIX = new RegExp(`^\\{"${CHECKSUM_FIELD}":(\\d{1,10}),`);

/**
 * The bytes of `metadata.json` for `metadata`, in this version's layout (`FORMAT_MAJOR`.x):
 * compact JSON opened by its checksum (a stale one in `metadata` is dropped). Throws
 * `invalid_argument` for another major version or a chunk in a file `files` does not list. The
 * bytes are a view (its byteOffset may not be 0) of memory no one else holds.
 */
export function encodeMetadata(metadata: CheckpointMetadata): Uint8Array {
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
  const body = new JsonBytes(HEAD_ROOM + 128 + 80 * entries.length, HEAD_ROOM);
  body.text(others.slice(0, -1));
  if (others !== "{}") body.byte(0x2c);
  writeV2(body, files, entries, metadata.checksum.blockSize);
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

/** Checks the checksum `metadata.json` opens with, if it has one; says whether it had one. */
function verifyChecksum(bytes: Uint8Array, text: string, where: string): boolean {
  const prefix = CHECKSUM_PREFIX.exec(text);
  if (!prefix) return false;
  const body = bytes.slice(prefix[0].length - 1);
  body[0] = 0x7b; // "{"
  if (crc32c(body) !== Number(prefix[1]))
    throw corrupt(where, `its bytes do not match their checksum (${CHECKSUM_FIELD}): it was changed or damaged`);
  return true;
}

/**
 * Parses and checks `metadata.json` of format 1.x or 2.x into one in-memory shape. A newer
 * major version is `unsupported_version`; anything malformed is `corrupt`, so a reader never
 * acts on half-understood metadata.
 */
export function parseMetadata(bytes: Uint8Array, where: string): CheckpointMetadata {
  if (!(bytes instanceof Uint8Array)) {
    throw new CheckpointError(
      "invalid_argument",
      `parseMetadata: pass the bytes of ${METADATA_FILE} as a Uint8Array, not ${describeValue(bytes)}`,
    );
  }
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch (cause) {
    throw new CheckpointError("corrupt", `${where}: not valid UTF-8; the checkpoint cannot be read`, {
      cause,
      context: { path: where },
    });
  }
  const checked = verifyChecksum(bytes, text, where);
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (cause) {
    throw new CheckpointError("corrupt", `${where}: not valid JSON; the checkpoint cannot be read`, {
      cause,
      context: { path: where },
    });
  }
  if (!isRecord(raw) || raw.format !== FORMAT_NAME) throw corrupt(where, `not a ${FORMAT_NAME} metadata file`);
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
  // 2.x entries are arrays checked field by field; every object elsewhere is searched for keys reaching a prototype.
  const { entries: _entries, ...searched } = raw;
  refuseForbiddenKeys(major >= 2 ? searched : raw, where);
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
  const { files, entries } =
    major >= 2 ? decodeV2(raw, checksum.blockSize, where) : decodeV1(raw, checksum.blockSize, where);
  // Held by the chunks now (`ChunkMetadata.hash`); the table is written again from them.
  delete raw[CONTENT_HASHES];
  return {
    ...(raw as unknown as CheckpointMetadata),
    files,
    entries,
    user: (raw.user as Record<string, unknown> | undefined) ?? {},
  };
}
