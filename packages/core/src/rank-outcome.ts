import { CheckpointError, type CheckpointErrorCode, isCheckpointErrorCode } from "./errors.js";
import type { ProcessGroup } from "./process-group.js";

/** A rank's failure as it travels to the others: its code and message (the cause stays on that rank). */
export interface RankFailure {
  readonly ok: false;
  readonly code: CheckpointErrorCode;
  readonly message: string;
}

/**
 * THE wire shape of "did this rank's part succeed", gathered after each rank's part of a
 * collective step: `{ ok: true }` with what the rank made, or its `RankFailure`.
 */
export type RankOutcome<T extends object = object> = ({ readonly ok: true } & T) | RankFailure;

/** The outcome a rank sends for an error it caught (anything thrown: a non-Cairn error is `storage`). */
export function rankFailure(error: unknown): RankFailure {
  if (error instanceof CheckpointError) return { ok: false, code: error.code, message: error.message };
  return { ok: false, code: "storage", message: error instanceof Error ? error.message : String(error) };
}

/** Messages another rank sends are cut to this many characters. */
const MAX_MESSAGE = 4096;

/**
 * A gathered outcome as this rank may trust it: undefined for a success (`ok` is `true`), else
 * the failure with its code checked (a code this Cairn does not know becomes `process_group`)
 * and its message a bounded string. Anything that is not a success is a failure.
 */
export function failureOf(outcome: unknown): RankFailure | undefined {
  const o = (typeof outcome === "object" && outcome !== null ? outcome : {}) as Record<string, unknown>;
  if (o.ok === true) return undefined;
  const message = typeof o.message === "string" ? o.message.slice(0, MAX_MESSAGE) : "no reason given";
  return { ok: false, code: isCheckpointErrorCode(o.code) ? o.code : "process_group", message };
}

/** The first rank whose gathered outcome is not a success, with its failure checked (`failureOf`); undefined when all succeeded. */
export function firstFailedRank(outcomes: readonly unknown[]): { rank: number; failure: RankFailure } | undefined {
  for (let rank = 0; rank < outcomes.length; rank++) {
    const failure = failureOf(outcomes[rank]);
    if (failure) return { rank, failure };
  }
  return undefined;
}

/**
 * Collective: every rank says whether its part of `what` ("copy its files of step 5")
 * succeeded (`failure` undefined) and resolves only if every rank's did. Otherwise each rank
 * rejects: one that failed with its own error, the others with the first failed rank's code,
 * naming that rank. Every rank must call it, failed or not, so none waits for one that gave up.
 */
export async function agreeAcrossRanks(group: ProcessGroup, failure: unknown, what: string): Promise<void> {
  const outcomes = await group.allGather<RankOutcome>(failure === undefined ? { ok: true } : rankFailure(failure));
  const failed = firstFailedRank(outcomes);
  if (failed === undefined) return;
  if (failure !== undefined) throw failure;
  throw new CheckpointError(failed.failure.code, `rank ${failed.rank} could not ${what}: ${failed.failure.message}`, {
    context: { rank: failed.rank },
  });
}
