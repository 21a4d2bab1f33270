import type { Box } from "../state/box.js";
import type { DType } from "../state/dtypes.js";
import type { Leaf } from "../state/leaf.js";
import type { ValueEntry } from "../format/metadata.js";
import type { KeyPath } from "../state/state-dict.js";

/** One chunk of one tensor (or one bytes blob) that a rank has and may be asked to write. */
export interface WriteItem {
  /** Index of the leaf in the rank's flattened state dict. */
  readonly leafIndex: number;
  readonly key: KeyPath;
  /** `displayKey(key)`, when the planner joined it: carried so that a save joins each key once. */
  readonly name?: string;
  readonly kind: "tensor" | "bytes";
  readonly dtype: DType;
  /** The tensor's global shape; for bytes, `[byteLength]`. */
  readonly shape: readonly number[];
  readonly chunk: Box;
  readonly byteLength: number;
}

/** An inline value and where it stood in the rank's state dict. */
export interface PlannedValue {
  readonly leafIndex: number;
  readonly entry: ValueEntry;
}

/** What one rank has to offer: made by `createLocalPlan` on every rank, gathered to the coordinator. */
export interface SavePlan {
  readonly rank: number;
  readonly items: readonly WriteItem[];
  readonly values: readonly PlannedValue[];
}

/** One data file a rank writes, with its items in file order. */
export interface DataFilePlan {
  readonly name: string;
  readonly items: readonly WriteItem[];
}

/** The coordinator's decision, scattered to every rank: who writes which item into which file. */
export interface GlobalSavePlan {
  /** Unique per save attempt; part of every data file name, so a losing writer never overwrites the winner's data. */
  readonly attempt: string;
  /** `files[rank]`: the files that rank writes. */
  readonly files: readonly (readonly DataFilePlan[])[];
  /** Inline values, deduplicated across ranks. */
  readonly values: readonly ValueEntry[];
  /**
   * Set only when the planner checked that no two items or values share a dotted key
   * (`displayKey`; one rank, whole tensors): then no two share a key, the metadata gives each its
   * own entry without comparing keys, and a data file's tensor names need no "#2" suffixes.
   */
  readonly distinctKeys?: boolean;
}

export interface GlobalPlanContext {
  readonly attempt: string;
  /** Upper bound on data files per rank: the number written in parallel. */
  readonly filesPerRank: number;
}

/**
 * Decides which bytes go where, as DCP's `SavePlanner` does. Call order: every rank calls
 * `createLocalPlan` on its flattened state dict; the coordinator (rank 0) gathers the plans,
 * calls `createGlobalPlan` once and scatters the result. Plans are plain JSON values. Throws
 * `invalid_argument` when ranks disagree about a key (different dtype or shape).
 */
export interface SavePlanner {
  createLocalPlan(leaves: readonly Leaf[], rank: number): SavePlan;
  createGlobalPlan(plans: readonly SavePlan[], context: GlobalPlanContext): GlobalSavePlan;
  /**
   * Optional: the data files `createGlobalPlan` gives `plan`'s rank when it leaves that rank every
   * item of its local plan (always so with one rank), as the items of each file in file order.
   * A background save asks it before the save is planned, to stage its copies laid out as those
   * files, which are then written from that memory without another copy; without it, copies
   * are staged leaf by leaf.
   */
  rankFiles?(plan: SavePlan, context: GlobalPlanContext): readonly (readonly WriteItem[])[];
}
