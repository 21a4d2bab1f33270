import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex, utf8ToBytes } from "@noble/hashes/utils.js";
import { CheckpointError, type CheckpointMetadata, type StorageAdapter, readMetadata } from "@cairn/core";
import { joinPath } from "@cairn/core/storage";
import { stepDir } from "../steps/step-naming.js";

/**
 * Which checkpoint a step directory holds, so a copy on another tier counts as this step's
 * replica only when it is the same checkpoint (docs/tiers.md, "When a copy counts"). A manager
 * writes a fresh `checkpointId` into each save's user metadata; copies keep it. A step saved
 * without one (an older Cairn, another tool) is known by a fingerprint of what copies keep too:
 * its commit time, user metadata and every chunk's box and CRCs (not the data file names).
 */
export type CopyIdentity = string;

/** The user-metadata field holding a save's identity. */
export const CHECKPOINT_ID_FIELD = "checkpointId";
const ID_PATTERN = /^[0-9a-f]{32}$/;
/**
 * The user-metadata field a save with `overwrite` sets: its copies replace an older checkpoint
 * they find under that step number on a slower tier (one the save could not reach to delete),
 * also in a later process (docs/tiers.md, "Saving a step number that exists").
 */
export const OVERWRITE_FIELD = "overwrite";

/** The time a checkpoint was saved (a manager's `savedAt`, else core's `createdAt`); NaN if neither parses. */
export function savedTime(metadata: CheckpointMetadata): number {
  const saved = metadata.user.savedAt;
  return typeof saved === "string" && Number.isFinite(Date.parse(saved))
    ? Date.parse(saved)
    : Date.parse(metadata.createdAt);
}

/** Whether a copy of `source` replaces `found`, another checkpoint under its step number: `source` was saved with overwrite, after `found`. */
export function replacesOlder(source: CheckpointMetadata, found: CheckpointMetadata): boolean {
  return source.user[OVERWRITE_FIELD] === true && savedTime(found) < savedTime(source);
}

/**
 * The one rule of which copies are a step (docs/reliability.md, "Durability"): the step is the
 * checkpoint its copy on the fastest tier holding it names (`reference`); a copy on another tier
 * is that step only if it names the same. Unknown identities (a metadata that cannot be read)
 * cannot tell them apart and count as the same.
 */
export function sameCheckpoint(reference: CopyIdentity | undefined, found: CopyIdentity | undefined): boolean {
  return reference === undefined || found === undefined || reference === found;
}

/** A new identity for a save: 128 random bits. */
export function newCheckpointId(): string {
  return bytesToHex(crypto.getRandomValues(new Uint8Array(16)));
}

/** The identity of the save that wrote `checkpointId` into its metadata. */
export function savedIdentity(checkpointId: string): CopyIdentity {
  return `id:${checkpointId}`;
}

/** Whether `value` is a checkpoint id as `newCheckpointId` makes them. */
export function isCheckpointId(value: unknown): value is string {
  return typeof value === "string" && ID_PATTERN.test(value);
}

/** The identity of a checkpoint from its (parsed, checked) metadata. */
export function identityOf(metadata: CheckpointMetadata): CopyIdentity {
  const id = metadata.user[CHECKPOINT_ID_FIELD];
  if (isCheckpointId(id)) return savedIdentity(id);
  // SHA-256 in JavaScript (@noble/hashes): the same digits in Node and in a browser, synchronously.
  const hash = sha256.create();
  const update = (text: string): void => void hash.update(utf8ToBytes(text));
  update(JSON.stringify([metadata.createdAt, metadata.user]));
  for (const entry of metadata.entries) {
    if (entry.kind === "value") update(JSON.stringify(entry));
    else
      for (const c of entry.chunks)
        update(JSON.stringify([entry.key, c.offsets, c.sizes, c.byteOffset, c.blockSize, c.crc32c]));
  }
  return `fp:${bytesToHex(hash.digest())}`;
}

/**
 * `step`'s copy on `storage` with its identity, once it is known to be readable: its metadata
 * parses and checks, and every data file it names is there with its recorded size. Throws
 * `corrupt` (or what reading threw) otherwise.
 */
export async function readableCopy(
  storage: StorageAdapter,
  step: number,
  signal?: AbortSignal,
): Promise<{ readonly identity: CopyIdentity; readonly metadata: CheckpointMetadata }> {
  const metadata = await readMetadata({ storage, path: stepDir(step), ...(signal ? { signal } : {}) });
  for (const [name, file] of Object.entries(metadata.files)) {
    const path = joinPath(file.dir ?? stepDir(step), name);
    const info = await storage.stat(path);
    if (info?.size !== file.size)
      throw new CheckpointError(
        "corrupt",
        `${storage.root}/${path} of step ${step} is ${info ? `${info.size} bytes, not ${file.size}` : "missing"}`,
        { context: { step, path } },
      );
  }
  return { identity: identityOf(metadata), metadata };
}
