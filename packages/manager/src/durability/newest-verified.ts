import {
  CheckpointError,
  type CoordinatedProcessGroup,
  type LoadResult,
  type StateDict,
  failureOf as outcomeFailure,
  isCheckpointError,
  rankFailure,
} from "@cairn/core";
import { verifyCheckpoint } from "@cairn/core/ops";
import { ManagerEmitter } from "../events/manager-events.js";
import type { RestoreOptions } from "../arguments/manager-arguments.js";
import { stepDir } from "../steps/step-naming.js";
import { readStepMetadata } from "../steps/stored-values.js";
import type { Tier } from "../tiers/tier.js";
import { stepCopies } from "../tiers/step-copies.js";
import { restoreFromTiers } from "../tiers/tiered-restore.js";
import { allStepsOf } from "../tiers/tiered-steps.js";
import type { VerifiedSteps } from "./verified-steps.js";

export interface NewestVerifiedSetup {
  readonly tiers: readonly Tier[];
  readonly events: ManagerEmitter;
  readonly group: CoordinatedProcessGroup;
  readonly verified: VerifiedSteps;
}

/** What a copy that does not verify fails with: its bytes are wrong or gone. Storage that cannot answer is not damage. */
const DAMAGE = new Set(["corrupt", "not_found", "not_committed", "unsupported_version"]);

function isDamage(error: unknown): boolean {
  return isCheckpointError(error) && DAMAGE.has(error.code);
}

interface Failure {
  readonly tier: number;
  readonly file?: string;
  readonly reason: string;
  readonly error: unknown;
  /** False for the thrown error of a restore whose tiers reported nothing (one tier, or none answered). */
  readonly heard?: boolean;
}

function failureOf(tier: number, error: unknown): Failure {
  const context = isCheckpointError(error) ? error.context : {};
  const file = context.file ?? context.path?.split("/").at(-1);
  const reason = error instanceof Error ? error.message : String(error);
  return { tier, reason, error, ...(file === undefined ? {} : { file }) };
}

function summary(failures: readonly Failure[]): string {
  return failures.map((f) => `tier ${f.tier}${f.file === undefined ? "" : ` ${f.file}`}: ${f.reason}`).join("; ");
}

/**
 * Every step skipped, newest first, as the `corrupt` error for "nothing verifies" lists them; a
 * tier that could not be listed (`unlisted`, its failure) may hold a good step: then `storage`.
 */
function nothingVerifies(
  tiers: readonly Tier[],
  steps: readonly number[],
  skipped: readonly string[],
  unlisted: Tier | undefined,
): CheckpointError {
  const root = tiers.map((t) => t.opened?.storage.root ?? `tier ${t.index}`).join(", ");
  if (unlisted !== undefined)
    return new CheckpointError(
      "storage",
      `no step verifies on the tiers that could be listed (${steps.length === 0 ? "none committed" : skipped.join(" | ")}), and tier ${unlisted.index} (${unlisted.opened?.storage.root ?? "not opened"}) could not be listed: it may hold a good step; try again once it answers`,
      { cause: unlisted.listingFailure, context: { transient: true } },
    );
  if (steps.length === 0) return new CheckpointError("not_found", `no committed step under ${root}`, { context: {} });
  return new CheckpointError(
    "corrupt",
    `none of the ${steps.length} committed steps under ${root} verifies: ${skipped.join(" | ")}`,
    { context: { step: steps.at(-1)! } },
  );
}

/** Reports a damaged step: one `skipped` event per tier copy, and remembers it damaged (it is not read again). */
function skip(setup: NewestVerifiedSetup, step: number, failures: readonly Failure[], skipped: string[]): void {
  for (const f of failures) setup.events.emit("skipped", { step, ...f });
  setup.verified.damaged(step, summary(failures));
  skipped.push(`step ${step} (${summary(failures)})`);
}

/**
 * `restore("latest")`: loads the newest committed step whose bytes verify (the load checks every
 * block it reads, so a good step is read once), falling back tier by tier (as any restore does)
 * and then step by step. A step whose every copy is damaged (corrupt, truncated, missing files)
 * is skipped with a `skipped` event per copy; one whose storage fails otherwise (an outage, a
 * denied read) is thrown, since it may be good. Every step damaged: `corrupt`, listing each.
 */
export async function restoreNewestVerified(
  setup: NewestVerifiedSetup,
  target: StateDict | undefined,
  options: RestoreOptions & { readonly processGroup: CoordinatedProcessGroup },
): Promise<{ readonly step: number; readonly result: LoadResult | StateDict }> {
  const { tiers, events, group, verified } = setup;
  const steps = await allStepsOf(tiers, events, group, true);
  const skipped: string[] = [];
  for (let i = steps.length - 1; i >= 0; i--) {
    const step = steps[i]!;
    const known = verified.damage(step);
    if (known !== undefined) {
      skipped.push(`step ${step} (${known})`);
      continue;
    }
    const attempt = await attemptRestore(setup, step, target, options);
    if ("result" in attempt) return { step, result: attempt.result };
    skip(setup, step, attempt.failures, skipped);
  }
  let unlisted = tiers.find((t) => t.listingFailure !== undefined);
  // Every rank throws alike: the first tier some rank could not list.
  if (group.worldSize > 1) {
    const down = await group.allGather(unlisted?.index ?? null);
    unlisted = tiers.find((t) => down.includes(t.index));
  }
  throw nothingVerifies(tiers, steps, skipped, unlisted);
}

/**
 * `restore(step)`: any restore, the durability contract told of what it found: a step read whole
 * is known good, one whose every copy is damaged is known damaged (verified nowhere from then on).
 */
export async function restoreVerifying(
  setup: NewestVerifiedSetup,
  step: number,
  target: StateDict | undefined,
  options: RestoreOptions & { readonly processGroup: CoordinatedProcessGroup },
): Promise<{ readonly result: LoadResult | StateDict; readonly vouched: boolean }> {
  // As any restore: each tier's failure heard is reported, the first one thrown too.
  const attempt = await attemptRestore(setup, step, target, options, true);
  if ("result" in attempt) return attempt;
  for (const f of attempt.failures)
    if (f.heard !== false) setup.events.report({ step, error: f.error, operation: "restore", tier: f.tier });
  setup.verified.damaged(step, summary(attempt.failures));
  throw attempt.error;
}

/**
 * One restore of `step`, fastest tier first, each tier's failure heard here first: its result
 * (those failures reported as `restore` errors, the step known good once read whole), or, when
 * every copy is damaged (on every rank: a collective), the error and each copy's failure. Any
 * other failure is thrown (it may be an outage: the step may be good), the others (with
 * `reportThrown`, it too) reported.
 */
async function attemptRestore(
  setup: NewestVerifiedSetup,
  step: number,
  target: StateDict | undefined,
  options: RestoreOptions & { readonly processGroup: CoordinatedProcessGroup },
  reportThrown = false,
): Promise<
  | { readonly result: LoadResult | StateDict; readonly vouched: boolean }
  | { readonly error: unknown; readonly failures: readonly Failure[] }
> {
  const { tiers, events, group, verified } = setup;
  const failures: Failure[] = [];
  const heard = new ManagerEmitter();
  heard.on("error", (e) => failures.push(failureOf(e.tier ?? 0, e.error)));
  try {
    const result = await restoreFromTiers(tiers, heard, step, target, options);
    for (const f of failures) events.report({ step, error: f.error, operation: "restore", tier: f.tier });
    return { result, vouched: verified.loaded(step, target === undefined ? undefined : (result as LoadResult)) };
  } catch (error) {
    if (failures.length === 0) failures.push({ ...failureOf(0, error), heard: false });
    let damaged = !options.signal?.aborted && isDamage(error) && failures.every((f) => isDamage(f.error));
    // Every rank decides alike: the step is passed over only if every rank found it damaged.
    if (group.worldSize > 1) damaged = (await group.allGather(damaged)).every((d) => d === true);
    if (damaged) return { error, failures };
    // Not passed over: the failure that says why (a tier that could not answer) is thrown, unless any restore's first is.
    const thrown = reportThrown ? error : (failures.find((f) => !isDamage(f.error))?.error ?? error);
    for (const f of failures)
      if ((reportThrown && f.heard !== false) || f.error !== thrown)
        events.report({ step, error: f.error, operation: "restore", tier: f.tier });
    throw thrown;
  }
}

/**
 * `latestStep({ verified: true })`: the newest committed step one of whose copies passes a full
 * `verify` (every byte read and checked), fastest tier first; steps this manager already knows
 * good (it saved, restored or verified them) are not read again. Damaged steps are skipped as by
 * `restoreNewestVerified`. With several ranks, rank 0 verifies and every rank gets its answer.
 */
export async function latestVerifiedStep(
  setup: NewestVerifiedSetup,
  signal: AbortSignal | undefined,
): Promise<number | undefined> {
  const { tiers, events, group } = setup;
  const steps = await allStepsOf(tiers, events, group, true);
  if (group.worldSize === 1) return newestVerifying(setup, steps, signal);
  let found: number | undefined;
  let failure: unknown;
  if (group.rank === 0)
    found = await newestVerifying(setup, steps, signal).catch((error: unknown) => void (failure = error));
  // Rank 0's answer or its failure: no rank waits for an answer that never comes.
  const sent = failure === undefined ? (found ?? null) : rankFailure(failure);
  const agreed = await group.group("cairn/manager/latest-verified").broadcast(sent, 0);
  if (failure !== undefined) throw failure;
  const failed = outcomeFailure(agreed);
  if (failed)
    throw new CheckpointError(failed.code, `rank 0 could not find the newest verified step: ${failed.message}`, {
      context: { rank: 0 },
    });
  return typeof agreed === "number" && steps.includes(agreed) ? agreed : undefined;
}

async function newestVerifying(
  setup: NewestVerifiedSetup,
  steps: readonly number[],
  signal: AbortSignal | undefined,
): Promise<number | undefined> {
  const { tiers, verified } = setup;
  const skipped: string[] = [];
  for (let i = steps.length - 1; i >= 0; i--) {
    const step = steps[i]!;
    if (verified.isGood(step)) return step;
    if (verified.damage(step) !== undefined) continue;
    const failures: Failure[] = [];
    // A tier that cannot say whether it holds the step may hold a good copy: the answer is unknown, thrown.
    let unknown: { error: unknown } | undefined;
    for await (const { tier, other } of stepCopies(tiers, step, signal, (_, error) => (unknown ??= { error }))) {
      try {
        if (other) throw other;
        const { storage } = await tier.open();
        const metadata = await readStepMetadata(storage, step, signal);
        const report = await verifyCheckpoint(storage, stepDir(step), metadata, signal ? { signal } : {});
        if (report.damaged.length === 0) {
          verified.good(step);
          return step;
        }
        const first = report.damaged[0]!;
        const reason = report.damaged.map((d) => `${d.key ?? d.file ?? "?"}: ${d.problem}`).join("; ");
        failures.push({
          tier: tier.index,
          reason,
          error: new CheckpointError("corrupt", `step ${step}: ${reason}`, { context: { step } }),
          ...(first.file === undefined ? {} : { file: first.file }),
        });
      } catch (error) {
        if (!isDamage(error) || signal?.aborted) throw error;
        failures.push(failureOf(tier.index, error));
      }
    }
    if (unknown !== undefined) throw unknown.error;
    if (failures.length > 0) skip(setup, step, failures, skipped);
  }
  return undefined;
}
