import {
  CheckpointError,
  type LoadOptions,
  type StorageAdapter,
  storageUrl,
  checkSaveOptions,
  type ProcessGroup,
  type SaveOptions,
  type StagingStrategy,
  type StorageOptions,
  isCoordinated,
} from "@cairn/core";
import { checkDuration } from "@cairn/core/storage";
import { invalid } from "./arguments/manager-arguments.js";
import { type SaveDecisionPolicy, savePolicyOf } from "./pipeline/save-policy.js";
import type { PreemptionSource, SignalTarget } from "./preemption/preemption.js";
import type { RetentionOptions } from "./steps/retention-policy.js";
import { type DurabilityOptions, checkDurabilityOptions } from "./durability/durability-options.js";
import { type ReplicationOptions, type TierOptions, checkTierOptions, locationsOf } from "./tiers/tier-config.js";

/** Which steps a manager keeps, and when it sweeps what crashed saves left. */
export interface ManagerRetentionOptions extends RetentionOptions {
  /**
   * Step directories without metadata.json (saves that crashed, with their temp files) are
   * deleted once their newest object is older than this, in ms (default 24 h), so a save still
   * running elsewhere is never touched; the manager lists the root for them once per this
   * interval. 0 deletes every one it finds but this manager's own saves in flight: only for a
   * root nothing else writes to. A save that fails in this process removes its own files at once.
   */
  readonly leftoverAgeMs?: number;
}

/** How `saveAsync` stages a state and uploads it in the background. */
export interface AsyncSaveOptions {
  /** Background saves in flight at once (default 1); `saveAsync` beyond it waits for the oldest. */
  readonly maxPending?: number;
  /** How tensors are snapshotted: `"copy"` into reused host buffers (default) or `"reference"`. */
  readonly staging?: StagingStrategy;
  /**
   * Write and commit background saves from a worker thread, where the storage allows it
   * (file://): default true. With `"reference"` staging the held tensors are first copied into
   * the staging pool in the background, a slice per event-loop turn. See `asyncSave`.
   */
  readonly uploadWorker?: boolean;
  /** Most bytes of host memory for staging buffers; a saveAsync waits for room, and one needing more is refused. */
  readonly stagingBudget?: number;
}

/** What a preemption notice is, and whether one makes a last checkpoint. */
export interface PreemptionOptions {
  /** Take one last checkpoint on a preemption notice (default true; never for readOnly managers). */
  readonly checkpoint?: boolean;
  /** Signals that mean preemption (default SIGTERM). While the manager is open they no longer end the process. */
  readonly signals?: readonly NodeJS.Signals[];
  /** More notice sources, such as `MetadataPreemptionSource.gce()`. */
  readonly sources?: readonly PreemptionSource[];
  /**
   * Where signals are listened for (default `process`); injected so tests send signals without a
   * real one. In a browser the default is the page's lifecycle instead (`PageLifecyclePreemptionSource`).
   */
  readonly signalTarget?: SignalTarget;
}

/**
 * The earlier flat spellings of the grouped options, still accepted: each is an alias of the
 * grouped option named beside it (giving both, with different values, is refused).
 */
export interface FlatManagerOptions extends RetentionOptions {
  /** Alias of `retention.leftoverAgeMs`. */
  readonly leftoverAgeMs?: number;
  /** Alias of `async.maxPending`. */
  readonly maxPendingAsync?: number;
  /** Alias of `async.staging`. */
  readonly staging?: StagingStrategy;
  /** Alias of `async.uploadWorker`. */
  readonly uploadWorker?: boolean;
  /** Alias of `async.stagingBudget`. */
  readonly stagingBudget?: number;
  /** Alias of `preemption.checkpoint`. */
  readonly checkpointOnPreemption?: boolean;
  /** Alias of `preemption.signals`. */
  readonly preemptionSignals?: readonly NodeJS.Signals[];
  /** Alias of `preemption.sources`. */
  readonly preemptionSources?: readonly PreemptionSource[];
  /** Alias of `preemption.signalTarget`. */
  readonly signalTarget?: SignalTarget;
}

/**
 * A manager's options, by concern: `retention`, `async` (background saves), `preemption`,
 * `save`/`load` (passed to each core save and load), the job's `processGroup`, and with several
 * locations `tiers` and `replication`. The flat spellings of `FlatManagerOptions` are aliases.
 */
export interface CheckpointManagerOptions extends FlatManagerOptions {
  /** Which steps are kept (`maxToKeep`, `keepPeriod`, `keepTimeInterval`, `bestFn`, `bestMode`) and the leftover sweep's age. */
  readonly retention?: ManagerRetentionOptions;
  /** How `saveAsync` stages and uploads. */
  readonly async?: AsyncSaveOptions;
  /** Preemption notices and the last checkpoint they make. */
  readonly preemption?: PreemptionOptions;
  /** For evaluators: list and restore only; `save` and `delete` are refused. */
  readonly readOnly?: boolean;
  /** Passed to the storage adapter when the location is a URL (`{ s3: {...} }`, `{ gs: {...} }`). */
  readonly storageOptions?: StorageOptions;
  /**
   * Write only what changed since the step this manager committed last (docs/incremental.md):
   * unchanged tensors reference that step's bytes, and retention keeps them while any kept step
   * uses them. `{ fullEvery: n }` makes every n-th save a full one (default: only the first).
   */
  readonly incremental?: boolean | { readonly fullEvery?: number };
  /** Options for each save (parallel files, checksum block size, retry bounds). */
  readonly save?: Pick<SaveOptions, "concurrency" | "blockSize" | "retry">;
  /** Options for each restore (parallel reads, read size, memory bound, retry bounds). */
  readonly load?: Pick<LoadOptions, "concurrency" | "maxReadBytes" | "maxInflightBytes" | "retry">;
  /** The clock, in ms since the epoch; injected so tests control `keepTimeInterval` and leftover ages. */
  readonly now?: () => number;
  /**
   * The job's ranks (from `initProcessGroup()`); every rank constructs a manager with it and
   * calls the same saves. Rank 0 commits and applies retention; a preemption notice on any rank
   * makes every rank save at one agreed step. The storage must be shared by all ranks.
   */
  readonly processGroup?: ProcessGroup;
  /**
   * With several locations (tiers, fastest first): each tier's retention and the steps it takes,
   * by position. Tier 0 defaults to the manager's own retention options, slower tiers keep every
   * step they receive. See docs/tiers.md.
   */
  readonly tiers?: readonly (TierOptions | undefined)[];
  /** With several locations: how steps are copied down the tiers. */
  readonly replication?: ReplicationOptions;
  /** The loss budget: how much may be at risk of loss, and what a save does beyond it (docs/reliability.md). */
  readonly durability?: DurabilityOptions;
}

/** Each grouped option and the flat alias it may be spelled as. */
const ALIASES = {
  retention: {
    maxToKeep: "maxToKeep",
    keepPeriod: "keepPeriod",
    keepTimeInterval: "keepTimeInterval",
    bestFn: "bestFn",
    bestMode: "bestMode",
    leftoverAgeMs: "leftoverAgeMs",
  },
  async: {
    maxPending: "maxPendingAsync",
    staging: "staging",
    uploadWorker: "uploadWorker",
    stagingBudget: "stagingBudget",
  },
  preemption: {
    checkpoint: "checkpointOnPreemption",
    signals: "preemptionSignals",
    sources: "preemptionSources",
    signalTarget: "signalTarget",
  },
} as const satisfies Record<string, Record<string, keyof FlatManagerOptions>>;

/**
 * The options as the manager's parts read them: every grouped option copied to its flat alias
 * (one spelling inside), after checking each group is an object and no value is given twice.
 */
export function flattenOptions(options: CheckpointManagerOptions): CheckpointManagerOptions {
  if (typeof options !== "object" || options === null) fail("object", "an object", options);
  const flat: Record<string, unknown> = { ...options };
  for (const [group, names] of Object.entries(ALIASES)) {
    const given = (options as Record<string, unknown>)[group];
    if (given === undefined) continue;
    if (typeof given !== "object" || given === null || Array.isArray(given)) fail(group, "an object", given);
    for (const [name, alias] of Object.entries(names)) {
      const value = (given as Record<string, unknown>)[name];
      if (value === undefined) continue;
      if (flat[alias] !== undefined && flat[alias] !== value)
        fail(`${group}.${name}`, `given once (its alias ${alias} is given too)`, value);
      flat[alias] = value;
    }
  }
  return flat as CheckpointManagerOptions;
}

/** Options of `close()`. */
export interface CloseOptions {
  /**
   * Tiered managers: keep retrying copies to slower tiers for up to this many ms before giving
   * up (as within a preemption's grace period). Without it, close waits until every copy either
   * succeeded or failed once after its retries, like `join()`.
   */
  readonly timeoutMs?: number;
}

/** Checks `close()`'s options; returns its `timeoutMs`. */
export function checkCloseOptions(options: CloseOptions): number | undefined {
  const timeoutMs = options.timeoutMs;
  if (timeoutMs !== undefined) checkDuration(timeoutMs, "close option timeoutMs", { infinite: true });
  return timeoutMs;
}

function fail(name: string, expected: string, value: unknown): never {
  throw invalid(`CheckpointManager option ${name}`, expected, value);
}

/** Rejects options of the wrong type before anything touches storage. */
export function checkOptions(options: CheckpointManagerOptions): void {
  if (typeof options !== "object" || options === null) fail("object", "an object", options);
  const count = (name: keyof CheckpointManagerOptions, min: number): void => {
    const value = options[name];
    if (value !== undefined && (typeof value !== "number" || !Number.isSafeInteger(value) || value < min))
      fail(name, `an integer >= ${min}`, value);
  };
  count("maxToKeep", 0);
  count("keepPeriod", 1);
  count("maxPendingAsync", 1);
  count("stagingBudget", 1);
  if (options.save !== undefined && (typeof options.save !== "object" || options.save === null))
    fail("save", "an object of save options", options.save);
  if (options.save !== undefined) checkSaveOptions(options.save, "CheckpointManager option save.");
  const incremental = options.incremental;
  if (incremental !== undefined && typeof incremental !== "boolean") {
    const every =
      typeof incremental === "object" && incremental !== null
        ? (incremental as { fullEvery?: unknown }).fullEvery
        : null;
    if (
      every === null ||
      (every !== undefined && (typeof every !== "number" || !Number.isSafeInteger(every) || every < 1))
    )
      fail("incremental", "true, false or { fullEvery: an integer >= 1 }", incremental);
  }
  if (options.staging !== undefined && options.staging !== "copy" && options.staging !== "reference")
    fail("staging", '"copy" or "reference"', options.staging);
  if (options.uploadWorker !== undefined && typeof options.uploadWorker !== "boolean")
    fail("uploadWorker", "a boolean", options.uploadWorker);
  if (options.checkpointOnPreemption !== undefined && typeof options.checkpointOnPreemption !== "boolean")
    fail("checkpointOnPreemption", "a boolean", options.checkpointOnPreemption);
  if (
    options.preemptionSignals !== undefined &&
    (!Array.isArray(options.preemptionSignals) ||
      !options.preemptionSignals.every((s) => typeof s === "string" && s.startsWith("SIG")))
  ) {
    fail("preemptionSignals", 'an array of signal names like "SIGTERM"', options.preemptionSignals);
  }
  if (
    options.preemptionSources !== undefined &&
    (!Array.isArray(options.preemptionSources) ||
      !options.preemptionSources.every((s) => typeof s?.start === "function" && typeof s?.stop === "function"))
  ) {
    fail("preemptionSources", "an array of PreemptionSource objects (start, stop)", options.preemptionSources);
  }
  const target = options.signalTarget;
  if (
    target !== undefined &&
    (typeof target !== "object" ||
      target === null ||
      typeof target.on !== "function" ||
      typeof target.off !== "function")
  ) {
    fail("signalTarget", "an object with on and off (like process or an EventEmitter)", target);
  }
  const positive = (name: keyof CheckpointManagerOptions): void => {
    const value = options[name];
    if (value !== undefined && (typeof value !== "number" || !(value > 0) || !Number.isFinite(value)))
      fail(name, "a positive number of ms", value);
  };
  positive("keepTimeInterval");
  const age = options.leftoverAgeMs;
  if (age !== undefined && (typeof age !== "number" || !(age >= 0) || !Number.isFinite(age)))
    fail("leftoverAgeMs", "a number of ms, 0 or more", age);
  if (options.bestFn !== undefined && typeof options.bestFn !== "function")
    fail("bestFn", "a function of the step's metrics", options.bestFn);
  if (options.bestMode !== undefined && options.bestMode !== "max" && options.bestMode !== "min")
    fail("bestMode", '"max" or "min"', options.bestMode);
  if (options.bestMode !== undefined && options.bestFn === undefined)
    fail("bestMode", "given together with bestFn", options.bestMode);
  if (options.readOnly !== undefined && typeof options.readOnly !== "boolean")
    fail("readOnly", "a boolean", options.readOnly);
  if (options.now !== undefined && typeof options.now !== "function")
    fail("now", "a function returning ms since the epoch", options.now);
  const group = options.processGroup;
  if (group !== undefined) {
    if (typeof group !== "object" || group === null || typeof group.allGather !== "function")
      fail("processGroup", "a ProcessGroup (from initProcessGroup())", group);
    if (group.worldSize > 1 && !isCoordinated(group)) {
      fail(
        "processGroup",
        "a group with group(tag), post and on (as initProcessGroup() returns) when worldSize > 1",
        "a plain ProcessGroup",
      );
    }
  }
  checkDurabilityOptions(options.durability);
  for (const name of ["storageOptions", "save", "load"] as const) {
    const value = options[name];
    if (value !== undefined && (typeof value !== "object" || value === null)) fail(name, "an object", value);
  }
}

/** Checks what a CheckpointManager is constructed with, before anything touches storage; returns its locations, fastest first. */
export function checkManagerArguments(
  location: unknown,
  saveInterval: unknown,
  given: CheckpointManagerOptions,
): { locations: (string | StorageAdapter)[]; options: CheckpointManagerOptions; policy: SaveDecisionPolicy } {
  const policy = savePolicyOf(saveInterval);
  const options = flattenOptions(given);
  checkOptions(options);
  const locations = locationsOf(location);
  if (locations.length === 1 && (options.tiers !== undefined || options.replication !== undefined)) {
    throw invalid(
      "CheckpointManager options tiers and replication",
      "given only with several locations (tiers)",
      options.tiers ?? options.replication,
    );
  }
  checkTierOptions(options.tiers, options.replication, locations.length);
  const worldSize = options.processGroup?.worldSize ?? 1;
  for (const l of locations) {
    if (worldSize > 1 && typeof l === "string" && storageUrl(l).protocol === "memory:") {
      throw new CheckpointError(
        "invalid_argument",
        `memory:// storage lives in one process, but the process group has ${worldSize} ranks; use storage every rank shares (file:// on a shared filesystem, s3://, gs://)`,
      );
    }
  }
  return { locations, options, policy };
}
