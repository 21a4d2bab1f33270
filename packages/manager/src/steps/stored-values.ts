import { CheckpointError, type CheckpointMetadata, type StorageAdapter, readMetadata } from "@cairn/core";
import { METADATA_FILE } from "@cairn/core/format";
import { stepDir } from "./step-naming.js";

/** What `metadata(step)` returns, as the manager stores it in each step's user metadata. */
export interface StepMetadata {
  readonly step: number;
  /** ISO 8601 commit time. */
  readonly savedAt: string;
  readonly metrics: Readonly<Record<string, number>>;
  readonly metadata: Readonly<Record<string, unknown>>;
}

/** Deeper JSON than this in a step's user metadata is refused rather than copied. */
const MAX_DEPTH = 256;

/** A step's stored metrics as retention and `metadata(step)` use them: finite numbers only, in a null-prototype object. */
export function metricsOf(stored: unknown): Record<string, number> {
  const metrics: Record<string, number> = Object.create(null);
  if (typeof stored !== "object" || stored === null || Array.isArray(stored)) return metrics;
  for (const [name, value] of Object.entries(stored))
    if (typeof value === "number" && Number.isFinite(value)) metrics[name] = value;
  return metrics;
}

/** A copy of JSON read from storage whose objects have no prototype, so no stored key (`__proto__`) can reach one. */
export function hostileJsonCopy(value: unknown, depth = 0): unknown {
  if (depth > MAX_DEPTH) throw new CheckpointError("corrupt", `stored metadata nests deeper than ${MAX_DEPTH} levels`);
  if (Array.isArray(value)) return value.map((item) => hostileJsonCopy(item, depth + 1));
  if (typeof value !== "object" || value === null) return value;
  const copy: Record<string, unknown> = Object.create(null);
  for (const [key, item] of Object.entries(value)) copy[key] = hostileJsonCopy(item, depth + 1);
  return copy;
}

/** What `metadata(step)` returns, from the step's metadata: its stored values copied into null-prototype objects. */
export function stepMetadataOf(step: number, metadata: CheckpointMetadata): StepMetadata {
  const user = metadata.user;
  const custom = hostileJsonCopy(user.metadata);
  return {
    step,
    savedAt: typeof user.savedAt === "string" ? user.savedAt : "",
    metrics: metricsOf(user.metrics),
    metadata:
      typeof custom === "object" && custom !== null && !Array.isArray(custom)
        ? (custom as Record<string, unknown>)
        : Object.create(null),
  };
}

/**
 * Refuses the metadata of another step under `step`'s name (a directory copied or renamed by
 * hand): its bytes verify, but its weights are not this step's. The manager stores `step` in each
 * step's user metadata; metadata without one (written by another tool) is taken as it is.
 */
export function checkStepOf(step: number, metadata: CheckpointMetadata, root: string): CheckpointMetadata {
  const stored = metadata.user.step;
  if (stored === undefined || stored === step) return metadata;
  const path = `${root.replace(/\/$/, "")}/${stepDir(step)}/${METADATA_FILE}`;
  throw new CheckpointError(
    "corrupt",
    `${path} holds the metadata of step ${JSON.stringify(stored)}, not of step ${step} (a directory copied or renamed by hand): it is not this step's checkpoint`,
    { context: { step, path, file: METADATA_FILE } },
  );
}

/** A step's metadata.json, read and checked to be that step's (`checkStepOf`): what every reader of a step starts with. */
export async function readStepMetadata(
  storage: StorageAdapter,
  step: number,
  signal?: AbortSignal,
): Promise<CheckpointMetadata> {
  const metadata = await readMetadata({ storage, path: stepDir(step), ...(signal ? { signal } : {}) });
  return checkStepOf(step, metadata, storage.root);
}
