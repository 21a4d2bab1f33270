import {
  CheckpointError,
  type CoordinatedProcessGroup,
  agreeAcrossRanks,
  type ProcessGroup,
  type SaveOptions,
  type SaveResult,
  type StateDict,
  isCheckpointError,
  isUnusable,
  save,
} from "@cairn/core";
import type { SaveStepOptions } from "../arguments/manager-arguments.js";
import type { ManagerEmitter } from "../events/manager-events.js";
import { stepDir } from "../steps/step-naming.js";
import type { StepStore } from "../steps/step-store.js";
import { CHECKPOINT_ID_FIELD, OVERWRITE_FIELD, savedIdentity } from "../tiers/copy-identity.js";
import type { TierSet } from "../tiers/tier-set.js";
import type { IncrementalBases } from "./incremental-bases.js";
import { agreeOnSave, decideSave } from "./save-decision.js";
import type { SavePipeline } from "./save-pipeline.js";

export interface StepSaverSetup {
  readonly tiers: TierSet;
  readonly pipeline: SavePipeline;
  readonly bases: IncrementalBases;
  readonly group: CoordinatedProcessGroup;
  readonly events: ManagerEmitter;
  readonly save: Pick<SaveOptions, "concurrency" | "blockSize" | "retry"> | undefined;
  readonly now: () => number;
  /** Asked once a save is decided, before anything is deleted or written (the loss budget may wait or refuse). */
  readonly beforeSave: (step: number) => Promise<void>;
}

/** How a save the manager decided to make runs: in the background or not, and whether a preemption asked for it. */
export interface SaveMode {
  readonly background: boolean;
  readonly forPreemption: boolean;
}

/**
 * One save of a step, from the decision to the commit: refuse, replace or skip a step that
 * exists (decided on rank 0 for every rank), choose the incremental base, save or stage it,
 * and hand the commit to the tier set's commit path.
 */
export class StepSaver {
  readonly #s: StepSaverSetup;

  constructor(setup: StepSaverSetup) {
    this.#s = setup;
  }

  /**
   * Saves `step`; resolves once it is committed (or staged, in the background). The caller runs it
   * inside `pipeline.exclusive(step, …)`: no deletion or other save of the step runs meanwhile.
   */
  async save(step: number, stateDict: StateDict, options: SaveStepOptions, mode: SaveMode): Promise<void> {
    const { tiers, pipeline, bases } = this.#s;
    const store = await tiers.open();
    await (mode.background ? pipeline.waitForRoom() : pipeline.drain());
    pipeline.throwFailure();
    if (pipeline.isPending(step))
      throw new CheckpointError("already_exists", `step ${step} is already being saved`, { context: { step } });
    // Each step's collectives get their own tag: with several saves in flight they need no order between them.
    const group = this.#s.group.group(`step/${step}`);
    const decision = await agreeOnSave(group, () =>
      decideSave(tiers.all, step, { overwrite: options.overwrite === true, forPreemption: mode.forPreemption }),
    );
    if (decision.kind === "refuse")
      throw new CheckpointError("already_exists", decision.message, { context: { step } });
    if (decision.kind === "done") return;
    // The budget's word, alike on every rank: one rank's refusal refuses the save everywhere, so no rank goes on alone.
    let refused: unknown;
    await this.#s.beforeSave(step).catch((error: unknown) => void (refused = error ?? new Error("refused")));
    if (group.worldSize > 1) await agreeAcrossRanks(group, refused, `save step ${step} within its loss budget`);
    else if (refused !== undefined) throw refused;
    if (decision.replace && this.#s.group.rank === 0) {
      // A background save using the old checkpoint as its base ends first: it would fail.
      await bases.deleting(step);
      await tiers.delete(step, true);
    }
    const savedAt = new Date(this.#s.now()).toISOString();
    const { checkpointId } = decision;
    const metadata = {
      step,
      savedAt,
      metrics: options.metrics ?? {},
      metadata: options.metadata ?? {},
      [CHECKPOINT_ID_FIELD]: checkpointId,
      // Its copies replace an older checkpoint under this number on a tier the save could not clear.
      ...(decision.replace ? { [OVERWRITE_FIELD]: true } : {}),
    };
    const { base, release } = await bases.choose(step, store);
    const where = {
      ...this.#s.save,
      storage: store.storage,
      path: stepDir(step),
      metadata,
      processGroup: group,
      ...(base === undefined ? {} : { incremental: { base: stepDir(base) } }),
    };
    let done = false;
    const committed = (result: SaveResult): Promise<void> => {
      done = true;
      return this.#committed(store, step, savedAt, metadata.metrics, result, group, checkpointId);
    };
    let releaseLater = false;
    try {
      await pipeline.hold(step, async () => {
        if (!mode.background) return committed(await this.#saveNow(store, step, stateDict, where, base));
        const { settled } = await pipeline.stage(step, stateDict, where, committed);
        // The base stays busy until the background save commits or fails; a failed one is not used again.
        releaseLater = true;
        void settled.finally(() => {
          if (!done && base !== undefined) bases.failed(base);
          release();
        });
        if (mode.forPreemption) {
          await settled;
          pipeline.throwFailure();
        }
      });
    } finally {
      if (!releaseLater) release();
    }
  }

  /**
   * A foreground save. One whose incremental base turns out unusable (damaged or gone since it
   * was chosen) is saved again in full at once, and that base is not used again.
   */
  async #saveNow(
    store: StepStore,
    step: number,
    stateDict: StateDict,
    where: SaveOptions,
    base: number | undefined,
  ): Promise<SaveResult> {
    try {
      return await save(stateDict, where);
    } catch (error) {
      if (base === undefined) return lostRace(store, step, error);
      this.#s.bases.failed(base);
      if (!isUnusable(error)) return lostRace(store, step, error);
      const { incremental: _, ...full } = where;
      return await save(stateDict, full).catch((e: unknown) => lostRace(store, step, e));
    }
  }

  /**
   * After a commit, through the tier set's commit path: alone, retention runs in the background.
   * With several ranks, rank 0 applies it and broadcasts the steps it deleted to every rank's
   * index (a collective of the step's own group), so when a save is done on any rank,
   * `allSteps()` reads the same steps there as on every other rank. A retention failure never
   * fails the save (see `RetentionRunner`).
   */
  async #committed(
    store: StepStore,
    step: number,
    savedAt: string,
    metrics: Readonly<Record<string, number>>,
    result: SaveResult,
    group: ProcessGroup,
    checkpointId: string,
  ): Promise<void> {
    const referenced = result.referenced ?? [];
    const identity = savedIdentity(checkpointId);
    this.#s.bases.committed(step, referenced.length > 0);
    const pass = this.#s.tiers.committed({ step, time: Date.parse(savedAt), metrics, referenced, identity });
    this.#s.events.emit("committed", {
      step,
      bytes: result.bytes,
      seconds: result.seconds,
      backgroundCopySeconds: result.backgroundCopySeconds ?? 0,
    });
    if (this.#s.group.worldSize === 1) return;
    await this.#s.pipeline.barrierAfter(pass, async () => {
      const deleted = await group.broadcast(pass === undefined ? undefined : await pass, 0);
      // Rank 0's message, yet checked: a rank trusts no value it did not make.
      if (this.#s.group.rank !== 0 && Array.isArray(deleted))
        for (const s of deleted) if (Number.isSafeInteger(s)) store.forget(s as number);
    });
  }
}

/** A commit that lost to another writer shows the step is committed: the index lists it. */
function lostRace(store: StepStore, step: number, error: unknown): never {
  if (isCheckpointError(error, "already_exists")) store.noteCommitted(step);
  throw error;
}
