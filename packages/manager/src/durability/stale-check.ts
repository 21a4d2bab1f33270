import { type CheckpointMetadata, type StorageAdapter, emitWarning, readMetadata } from "@cairn/core";
import type { ManagerEmitter } from "../events/manager-events.js";
import { stepDir } from "../steps/step-naming.js";

/**
 * What a step's tensors hold, as one string: every entry's key, dtype and shape (or byte length),
 * and every chunk's position and content hash (format 2.2 `contentHashes`), or its block CRC32Cs
 * for steps saved without hashes: the same bytes as another dtype or shape are other weights.
 * Undefined for a step without tensors or bytes (nothing to compare).
 */
export function contentFingerprint(metadata: CheckpointMetadata): string | undefined {
  const parts: string[] = [];
  for (const entry of metadata.entries) {
    if (entry.kind === "value") continue;
    const type = entry.kind === "tensor" ? `${entry.dtype}[${entry.shape.join(",")}]` : `bytes[${entry.byteLength}]`;
    const key = `${JSON.stringify(entry.key)}:${type}`;
    for (const chunk of entry.chunks)
      parts.push(`${key}@${chunk.offsets.join(",")}=${chunk.hash ? `h${chunk.hash}` : `c${chunk.crc32c.join(",")}`}`);
  }
  return parts.length > 0 ? parts.join("|") : undefined;
}

/** The fingerprint of `step` as committed on `storage`; null when its metadata cannot be read now (listing and restore report that, not this check). */
async function fingerprintOn(storage: StorageAdapter, step: number): Promise<string | undefined | null> {
  try {
    return fingerprintOf(await readMetadata({ storage, path: stepDir(step) }));
  } catch {
    return null;
  }
}

/**
 * The fingerprint of metadata in hand; null when it cannot be read: a load's metadata decodes a
 * chunk's checksums when first read, and one this rank never loaded may be forged (the load
 * reports what it checked; this check only stops comparing).
 */
function fingerprintOf(metadata: CheckpointMetadata): string | undefined | null {
  try {
    return contentFingerprint(metadata);
  } catch {
    return null;
  }
}

/**
 * Warns (`stale`) when a committed step holds the same weights as the step committed or
 * restored before it in this process: training that silently stopped updating. Each commit's
 * metadata is read back once, in the background, in commit order; `settled()` waits for that.
 */
export class StaleCheck {
  readonly #events: ManagerEmitter;
  #previous: { readonly step: number; readonly fingerprint: string | undefined } | undefined;
  #chain: Promise<void> = Promise.resolve();

  constructor(events: ManagerEmitter) {
    this.#events = events;
  }

  /** A step committed on `storage`: compared with the one before once its metadata is read. */
  committed(step: number, storage: StorageAdapter): void {
    this.#chain = this.#chain.then(async () => {
      const fingerprint = await fingerprintOn(storage, step);
      if (fingerprint === null) this.#previous = undefined;
      else this.#compare(step, fingerprint);
    });
  }

  /** A step restored whole without a target (no metadata in hand): its metadata is read from `storage`, in the background. */
  restoredFrom(step: number, storage: StorageAdapter): void {
    this.#chain = this.#chain.then(async () => {
      const fingerprint = await fingerprintOn(storage, step);
      this.#previous = fingerprint === null ? undefined : { step, fingerprint };
    });
  }

  /** A step restored whole from `metadata`: the next save is compared with it. */
  restored(step: number, metadata: CheckpointMetadata): void {
    this.#chain = this.#chain.then(() => {
      const fingerprint = fingerprintOf(metadata);
      this.#previous = fingerprint === null ? undefined : { step, fingerprint };
    });
  }

  settled(): Promise<void> {
    return this.#chain;
  }

  #compare(step: number, fingerprint: string | undefined): void {
    const previous = this.#previous;
    this.#previous = { step, fingerprint };
    if (previous === undefined || fingerprint === undefined || previous.step === step) return;
    if (previous.fingerprint !== fingerprint) return;
    const message = `step ${step} holds the same weights as step ${previous.step}: is training still updating them?`;
    // Nobody listening: a process warning, as for background failures.
    if (!this.#events.emit("stale", { step, sameAs: previous.step, message }))
      emitWarning(`CheckpointManager: ${message}`, "CAIRN_STALE_SAVE");
  }
}
