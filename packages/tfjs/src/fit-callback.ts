import type * as tf from "@tensorflow/tfjs";
import type { StateDict } from "@cairn/core";
import type { CheckpointManager } from "@cairn/manager";
import type { DataCursor } from "./data-cursor.js";
import { FIT_KEY, type FitPosition } from "./fit-position.js";
import type { LayerSeeds } from "./layer-seeds.js";
import { getStateDict } from "./state-dict.js";

/** When to save: at the end of every epoch, or every n batches. */
export type SaveEvery = number | "epoch";

export interface FitCallbackContext {
  readonly model: tf.LayersModel;
  readonly manager: CheckpointManager;
  /** Where the run is; the callback moves it on as batches are trained. */
  readonly position: FitPosition;
  readonly cursor: DataCursor<unknown>;
  readonly every: SaveEvery;
  readonly seeds: LayerSeeds;
  /** The step this run resumed from: committed already, never saved again. */
  readonly resumedFrom: number | undefined;
  readonly log: (message: string) => void;
}

type Logs = Record<string, unknown> | undefined;

/** A save decided at a batch's end, taken at the next callback, when it is known whether the epoch ended there. */
interface PendingSave {
  readonly position: FitPosition;
  readonly metrics: Record<string, number>;
}

/** Lets timers and signal handlers run: a training loop whose callbacks resolve at once never yields otherwise. */
function turn(): Promise<void> {
  return new Promise((resolve) =>
    typeof setImmediate === "function" ? setImmediate(resolve) : setTimeout(resolve, 0),
  );
}

/**
 * The metrics of tfjs's logs as finite numbers (tfjs's `batch` and `size` are not metrics).
 * Logs hold numbers when tfjs wraps the callback in a CustomCallback, scalar tensors otherwise.
 */
async function metricsOf(logs: Logs): Promise<Record<string, number>> {
  const metrics: Record<string, number> = {};
  for (const [name, value] of Object.entries(logs ?? {})) {
    if (name === "batch" || name === "size") continue;
    const number =
      typeof value === "number"
        ? value
        : typeof (value as Partial<tf.Tensor> | null)?.data === "function"
          ? (await (value as tf.Tensor).data())[0]
          : undefined;
    if (typeof number === "number" && Number.isFinite(number)) metrics[name] = number;
  }
  return metrics;
}

/**
 * The callback cairnCheckpoint's `fit` and `fitDataset` add last to the user's: it counts steps,
 * seeds the random layers per batch, saves through the manager's `saveAsync` (every n batches, at
 * epoch ends, and once when the run finishes, marking that step), and on a preemption notice
 * saves at the next batch end, waits for the commit and sets `model.stopTraining`. Its methods
 * are bound, so tfjs can use it as a `CustomCallback` config or call it as a callback object.
 *
 * A save due at a batch end waits for the next callback: at the next batch's start it saves the
 * position after that batch; at the epoch's end it saves the epoch as complete, with the epoch's
 * logs (validation metrics included) as metrics.
 */
export class FitCallback {
  /** Whether a preemption notice stopped the run. */
  preempted = false;
  readonly #context: FitCallbackContext;
  #pending: PendingSave | undefined;
  #stoppedAtBatchEnd = false;
  #lastSaved: number | undefined;
  #prepared: Promise<void> | undefined;

  constructor(context: FitCallbackContext) {
    this.#context = context;
    this.#lastSaved = context.resumedFrom;
  }

  readonly setParams = (): void => undefined;
  readonly setModel = (): void => undefined;
  readonly onTrainBegin = async (): Promise<void> => undefined;

  readonly onEpochBegin = async (epoch: number): Promise<void> => {
    const { position } = this.#context;
    // A resumed run begins in the epoch it stopped in, with that epoch's batches trained so far.
    if (epoch !== position.epoch) {
      position.epoch = epoch;
      position.batch = 0;
    }
    this.#stoppedAtBatchEnd = false;
  };

  readonly onBatchBegin = async (): Promise<void> => {
    await this.#flush();
    const { position, seeds } = this.#context;
    seeds.apply(position.seed, position.step + 1);
  };

  readonly onBatchEnd = async (_batch: number, logs?: Logs): Promise<void> => {
    const { model, manager, position, cursor, every, log } = this.#context;
    position.step++;
    position.batch++;
    position.data = cursor.position;
    // After the first batch the optimizer's state exists: ready the staging memory for the saves.
    this.#prepared ??= this.#prepare();
    await turn();
    if (manager.shouldSave(position.step)) {
      // A preemption notice (the manager's interval never comes due): save now and wait for the commit.
      await this.#save(position.snapshot(), await metricsOf(logs));
      if (manager.reachedPreemption(position.step)) {
        model.stopTraining = true;
        this.preempted = true;
        log(
          `stopped at step ${position.step} (epoch ${position.epoch + 1}, batch ${position.batch}); run again to resume`,
        );
      }
    } else if (every !== "epoch" && position.step % every === 0) {
      this.#pending = { position: position.snapshot(), metrics: await metricsOf(logs) };
    }
    this.#stoppedAtBatchEnd = model.stopTraining;
  };

  readonly onEpochEnd = async (epoch: number, logs?: Logs): Promise<void> => {
    const { model, position, cursor, every } = this.#context;
    const perEpoch = position.layout.batchesPerEpoch;
    // fitDataset ends an epoch early when training stops at a batch end, unless that batch was its last.
    const complete = !this.#stoppedAtBatchEnd || (perEpoch !== null && position.batch >= perEpoch);
    if (complete) {
      position.epoch = epoch + 1;
      position.batch = 0;
    }
    position.data = cursor.position;
    const pending = this.#pending;
    this.#pending = undefined;
    if (this.preempted) return;
    const ending = model.stopTraining || (complete && epoch + 1 >= position.epochs);
    if (ending) position.finished = true;
    if (pending || ending || (complete && every === "epoch"))
      await this.#save(position.snapshot(), { ...pending?.metrics, ...(await metricsOf(logs)) });
  };

  readonly onTrainEnd = async (): Promise<void> => {
    await this.#flush();
    await this.#prepared;
  };

  async #flush(): Promise<void> {
    const pending = this.#pending;
    this.#pending = undefined;
    if (pending) await this.#save(pending.position, pending.metrics);
  }

  async #state(position: FitPosition): Promise<StateDict> {
    const { model } = this.#context;
    return { ...(await getStateDict(model, model.optimizer)), [FIT_KEY]: position };
  }

  #prepare(): Promise<void> {
    const prepared = this.#state(this.#context.position).then((state) => this.#context.manager.prepare(state));
    // Awaited by the next save; until then a failure must not count as unhandled.
    prepared.catch(() => undefined);
    return prepared;
  }

  async #save(position: FitPosition, metrics: Record<string, number>): Promise<void> {
    if (position.step === this.#lastSaved) return;
    await this.#prepared;
    const state = await this.#state(position);
    await this.#context.manager.saveAsync(position.step, state, {
      force: true,
      metrics,
    });
    this.#lastSaved = position.step;
  }
}
