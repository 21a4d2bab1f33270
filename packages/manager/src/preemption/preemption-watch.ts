import { CheckpointError, type CoordinatedProcessGroup } from "@cairn/core";
import type { ManagerEmitter } from "../events/manager-events.js";
import { platformPreemptionSources } from "#platform/preemption/preemption-defaults.js";
import type { DefaultPreemptionOptions, PreemptionSource } from "./preemption.js";

/** What a manager's options say of preemption notices. */
export interface WatchedOptions extends DefaultPreemptionOptions {
  readonly checkpointOnPreemption?: boolean;
  readonly preemptionSources?: readonly PreemptionSource[];
  readonly readOnly?: boolean;
}

/** The sources a manager watches: the platform's defaults and its own; none when it takes no preemption checkpoint. */
export function watchedSources(options: WatchedOptions): PreemptionSource[] {
  if (!(options.checkpointOnPreemption ?? true) || options.readOnly) return [];
  return [...platformPreemptionSources(options), ...(options.preemptionSources ?? [])];
}

/** The topic a preemption notice is posted on, and the tag of the one collective that agrees on its step. */
const PREEMPTION_TOPIC = "cairn/preemption";

export interface PreemptionWatchOptions {
  readonly group: CoordinatedProcessGroup;
  /** Started now and stopped by `stop()`; empty when the manager takes no preemption checkpoint. */
  readonly sources: readonly PreemptionSource[];
  /** Receives `preemption` events, and `error` events of sources that cannot watch. */
  readonly events: ManagerEmitter;
}

/**
 * A manager's preemption checkpoint: listens to the notice sources, and with several ranks
 * agrees on the one step every rank saves at. The manager constructs it, calls `enter(step)` then
 * `isDue(step)` at each save, `checkpointed(step)` once that checkpoint is committed, and `stop()`
 * on close. Alone, the next save after a notice is the preemption checkpoint.
 */
export class PreemptionWatch {
  readonly #group: CoordinatedProcessGroup;
  readonly #sources: readonly PreemptionSource[];
  readonly #events: ManagerEmitter;
  readonly #unsubscribe: () => void;
  #notice: string | undefined;
  /** Several ranks only: the agreement on the preemption step, its result, and the last step this rank entered. */
  #agreement: Promise<number> | undefined;
  #target: number | undefined;
  #lastStep = -1;
  #checkpointed: number | undefined;

  constructor({ group, sources, events }: PreemptionWatchOptions) {
    this.#group = group;
    this.#sources = sources;
    this.#events = events;
    for (const source of sources) {
      source.start(
        (reason) => group.post(PREEMPTION_TOPIC, { reason }),
        (error) => events.report({ error, operation: "preemption" }),
      );
    }
    // A notice on any rank reaches every rank through the group (alone: from this process).
    this.#unsubscribe = group.on(PREEMPTION_TOPIC, (value, from) =>
      this.#onNotice((value as { reason: string }).reason, from),
    );
  }

  /** Whether `step` may be the preemption checkpoint, without waiting: with several ranks, also while the agreement is open. */
  mayBeDue(step: number): boolean {
    return this.#pending() && (this.#group.worldSize === 1 || (this.#target ?? step) === step);
  }

  /** Records that this rank reached `step`: what it reports if a notice arrives before its next save. */
  enter(step: number): void {
    this.#lastStep = step;
  }

  /**
   * Whether `step` is the preemption checkpoint; with several ranks, waits for the agreement once
   * a notice arrived, and throws `invalid_argument` if this rank already passed the agreed step.
   */
  async isDue(step: number): Promise<boolean> {
    if (this.#agreement && this.#target === undefined) {
      this.#target = await this.#agreement;
      if (step > this.#target) {
        throw new CheckpointError(
          "invalid_argument",
          `the ranks agreed to checkpoint for preemption at step ${this.#target}, but this rank is already at step ${step}; with a process group, call save or saveAsync at every step`,
          { context: { step } },
        );
      }
    }
    return this.#pending() && (this.#group.worldSize === 1 || this.#target === step);
  }

  /** The preemption checkpoint is committed at `step`. */
  checkpointed(step: number): void {
    this.#checkpointed = step;
  }

  /** True once the preemption checkpoint is committed at `step` or before. */
  reached(step: number): boolean {
    return this.#checkpointed !== undefined && step >= this.#checkpointed;
  }

  /** Stops the sources and stops listening for notices. */
  stop(): void {
    for (const source of this.#sources) source.stop();
    this.#unsubscribe();
  }

  /**
   * With several ranks, each reports the last step it entered as soon as the notice arrives, from
   * here rather than from the training loop (so no rank's loop waits on another's), and the step
   * after the latest of them is where every rank saves: each waits for the answer at its next step.
   */
  #onNotice(reason: string, from: number): void {
    if (this.#notice !== undefined) return;
    this.#notice = reason;
    if (this.#group.worldSize > 1) {
      this.#agreement = this.#group
        .group(PREEMPTION_TOPIC)
        .allGather(this.#lastStep)
        .then((steps) => steps.reduce((a, b) => Math.max(a, b)) + 1);
      // Awaited by the next save; marked handled so a broken group is reported there, not as unhandled.
      this.#agreement.catch(() => undefined);
    }
    this.#events.emit("preemption", { reason: this.#group.worldSize > 1 ? `${reason} (on rank ${from})` : reason });
  }

  #pending(): boolean {
    return this.#notice !== undefined && this.#checkpointed === undefined;
  }
}
