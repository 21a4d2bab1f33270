// What the `cairn ui` server answers, shared with the page (packages/cli/page imports these types only).
import type { CheckpointDiff, CheckpointSummary, Damage, TensorStats } from "@cairn/core/ops";
import type { StepState } from "@cairn/manager";

export type {
  CheckpointDiff,
  CheckpointSummary,
  Damage,
  EntryDiff,
  InspectedEntry,
  TensorStats,
} from "@cairn/core/ops";
export type { StepState } from "@cairn/manager";

/**
 * A verification of a step's copy on one tier. `by` says who verified it: the UI's own verify
 * button today; a manager that records verifications in the run (issue 32) fills the same field.
 */
export interface Verification {
  readonly ok: boolean;
  readonly tier: number;
  /** ISO 8601 time the verification finished. */
  readonly at: string;
  readonly by: "ui";
  /** Problems found (0 when ok). */
  readonly damaged: number;
}

/** One step of the run, across its tiers (fastest first). */
export interface StepRow {
  readonly step: number;
  /** Its state on each tier; null where the tier does not hold it. */
  readonly tiers: readonly (StepState | null)[];
  /** The tier its figures (and its entries, statistics, diffs) come from: the first holding it committed and readable. */
  readonly tier: number;
  readonly state: StepState;
  /** Bytes the step wrote under its own directory. */
  readonly bytes: number;
  /** An incremental step's bytes of earlier steps' files it uses; null for a full step. */
  readonly referencedBytes: number | null;
  readonly time: string | null;
  /** Seconds from the save's start to its commit; null when the metadata does not say. */
  readonly saveSeconds: number | null;
  readonly metrics: Readonly<Record<string, number>>;
  readonly error: { readonly code: string; readonly message: string } | null;
  /** The newest verification of its copy on `tier`, while that copy is unchanged; null when none. */
  readonly verification: Verification | null;
}

/** `GET api/steps`. */
export interface StepsResponse {
  /** The tiers' locations, fastest first (credentials never shown). */
  readonly tiers: readonly string[];
  readonly steps: readonly StepRow[];
  /** Every metric name any step recorded, sorted. */
  readonly metrics: readonly string[];
  /** The newest committed step whose last verification passed; null when none has. */
  readonly newestVerified: number | null;
  /** Objects under the tiers that are not steps. */
  readonly others: number;
  /** How often the page asks again, in ms. */
  readonly refreshMs: number;
}

/** `GET api/step?step=N[&tier=T]`. */
export interface StepResponse {
  readonly step: number;
  readonly tier: number;
  readonly where: string;
  readonly summary: CheckpointSummary;
}

/** `GET api/stats?step=N&key=<JSON key path>[&tier=T]`. */
export interface StatsResponse {
  readonly step: number;
  readonly tier: number;
  readonly stats: TensorStats;
}

/** `GET api/diff?a=N&b=M`. */
export interface DiffResponse extends CheckpointDiff {
  readonly a: { readonly step: number; readonly tier: number; readonly where: string };
  readonly b: { readonly step: number; readonly tier: number; readonly where: string };
}

/** One line of `GET api/verify?step=N[&tier=T]`, a stream of JSON lines. */
export type VerifyEvent =
  | {
      readonly type: "start";
      readonly step: number;
      readonly tier: number;
      readonly where: string;
      readonly total: number;
    }
  | { readonly type: "progress"; readonly bytes: number }
  | {
      readonly type: "done";
      readonly ok: boolean;
      readonly entries: number;
      readonly files: number;
      readonly bytes: number;
      readonly damaged: readonly Damage[];
      readonly damagedKeys: readonly string[];
      readonly verification: Verification;
    }
  | { readonly type: "failed"; readonly error: ApiError["error"] };

/** Any failed request's body. */
export interface ApiError {
  readonly error: { readonly code: string; readonly message: string };
}
