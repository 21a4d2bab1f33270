import { type StorageAdapter, isDamaged } from "@cairn/core";
import { METADATA_FILE } from "@cairn/core/format";
import { type Damage, verifyCheckpoint } from "@cairn/core/ops";
import { stepDir } from "./step-naming.js";
import { readStepMetadata } from "./stored-values.js";

/** What reading one step's every byte found. */
export interface StepVerification {
  /** True when its metadata and every byte it uses (its own files, its parts of earlier steps' files) match their checksums. */
  readonly ok: boolean;
  /** Bytes read and checked. */
  readonly bytes: number;
  /** Every problem found, a metadata.json that cannot be read included; empty when `ok`. */
  readonly damaged: readonly Damage[];
}

export interface VerifyStepOptions {
  readonly signal?: AbortSignal;
  readonly onRead?: (bytes: number) => void;
}

/**
 * Reads a committed step's metadata and then every byte it uses once, through core's
 * `verifyCheckpoint`: damage (a metadata.json that cannot be parsed, a truncated, missing or
 * changed data file) is reported, never thrown. Storage failures and `cancelled` are thrown; a
 * step deleted meanwhile is `not_found`. Read-only. `cairn doctor` calls it for every step.
 */
export async function verifyStep(
  storage: StorageAdapter,
  step: number,
  options: VerifyStepOptions = {},
): Promise<StepVerification> {
  const { signal } = options;
  let metadata;
  try {
    metadata = await readStepMetadata(storage, step, signal);
  } catch (error) {
    if (!isDamaged(error)) throw error;
    return { ok: false, bytes: 0, damaged: [{ file: METADATA_FILE, problem: error.message }] };
  }
  const report = await verifyCheckpoint(storage, stepDir(step), metadata, {
    ...(signal ? { signal } : {}),
    ...(options.onRead ? { onRead: options.onRead } : {}),
  });
  return { ok: report.damaged.length === 0, bytes: report.bytes, damaged: report.damaged };
}
