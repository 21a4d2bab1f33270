import type * as tf from "@tensorflow/tfjs";
import { CheckpointError, type StorageAdapter } from "@cairn/core";
import { redactUrl, storageUrl } from "@cairn/core/storage";
import { CheckpointManager, type CloseOptions, type JoinResult } from "@cairn/manager";
import { DataCursor, type DatasetLike } from "./data-cursor.js";
import { FitCallback } from "./fit-callback.js";
import { type FitCheckpointOptions, checkFitArgs, checkFitDatasetArgs, managerOptionsOf } from "./fit-options.js";
import { type FitLayout, FitPosition } from "./fit-position.js";
import { checkSameRun, readFitPosition, restoreTraining } from "./fit-restore.js";
import { invalid } from "./invalid-argument.js";
import { LayerSeeds } from "./layer-seeds.js";
import { type TensorsLike, mapTensors, tensorBatches } from "./tensor-batches.js";

type Callbacks = tf.ModelFitDatasetArgs<unknown>["callbacks"];
type Train = (cursor: DataCursor<unknown>, initialEpoch: number, callbacks: Callbacks) => Promise<tf.History>;

/**
 * Whether a run at `position` has nothing left to train for `epochs`: it finished (and is not
 * asked for more epochs), or is past them, or stopped after the last batch of the last epoch
 * (a preemption there leaves only the epoch's end to run, which trains nothing).
 */
function trained(position: FitPosition, epochs: number, batchesPerEpoch: number | null): boolean {
  if (position.finished && epochs <= position.epochs) return true;
  if (position.epoch >= epochs) return true;
  return (
    position.epoch === epochs - 1 &&
    batchesPerEpoch !== null &&
    Number.isFinite(batchesPerEpoch) &&
    position.batch >= batchesPerEpoch
  );
}

/** Where a run is, for messages: epochs done, or how far into one. */
function progress(position: FitPosition, epochs: number): string {
  return position.batch === 0
    ? `${position.epoch} of ${epochs} epochs done`
    : `epoch ${position.epoch + 1} of ${epochs}, ${position.batch} batches into it`;
}

/** The manager never saves on its own: the callback forces every save it decides on. */
const NEVER = Number.MAX_SAFE_INTEGER;

/**
 * Checkpoints `model.fit` and `model.fitDataset` runs, like Keras's `BackupAndRestore` and
 * `ModelCheckpoint` together: `await ckpt.fitDataset(ds, args)` trains from scratch on a new
 * root, and on a root with a committed step first restores the weights, the optimizer's state
 * and the data position, then trains on from the very next batch. Saves go through the
 * manager's `saveAsync` (every epoch or every n batches, with the logs' metrics); a preemption
 * notice (SIGTERM, SIGINT, or the manager's `preemptionSources`) saves at the next batch end,
 * stops training, and the call resolves normally (`preempted` is then true); a run that ends
 * marks its last step finished, and calling again does nothing but restore it, and says so.
 *
 * Call order: `cairnCheckpoint(model, root, options)`, compile the model, any number of `fit` /
 * `fitDataset` calls (one at a time), then `close()`, after which the process exits on its own.
 * Throws `CheckpointError`: `invalid_argument` for bad arguments, `mismatch` for a root holding
 * another model's checkpoints or another run's data position (nothing is assigned then).
 */
export class FitCheckpoint {
  readonly manager: CheckpointManager;
  readonly #model: tf.LayersModel;
  readonly #options: FitCheckpointOptions;
  readonly #where: string;
  readonly #log: (message: string) => void;
  /** Where the model is in this process, once a call restored or trained it. */
  #position: FitPosition | undefined;
  /** A dataset that cannot seek keeps its cursor across calls: its shuffle has moved on with it. */
  readonly #cursors = new WeakMap<object, DataCursor<unknown>>();
  #training = false;
  #preempted = false;

  constructor(model: tf.LayersModel, location: string | StorageAdapter, options: FitCheckpointOptions = {}) {
    if (
      typeof model !== "object" ||
      model === null ||
      typeof (model as Partial<tf.LayersModel>).fitDataset !== "function"
    )
      throw invalid("cairnCheckpoint's model", "a tfjs LayersModel", model);
    this.manager = new CheckpointManager(location, NEVER, managerOptionsOf(options));
    this.#model = model;
    this.#options = options;
    this.#where =
      typeof location !== "string"
        ? `the ${location.protocol}:// storage given`
        : location.includes("://")
          ? redactUrl(storageUrl(location))
          : location;
    const log = options.log ?? ((message: string) => console.info(message));
    this.#log = log === false ? () => undefined : log;
    this.manager.on("preemption", ({ reason }) =>
      this.#log(`${reason}: checkpointing after this batch, then stopping`),
    );
  }

  /** Whether the last call was stopped by a preemption notice (its last step is committed). */
  get preempted(): boolean {
    return this.#preempted;
  }

  /** Batches trained since the run began, as far as this process knows (undefined before a call). */
  get step(): number | undefined {
    return this.#position?.step;
  }

  /**
   * `model.fitDataset(dataset, args)`, resumed from the root's newest step. Exact (the weights of
   * an uninterrupted run, bit for bit) when the dataset's passes depend only on how many came
   * before, as tf.data's do with a seeded `shuffle(n, seed)`; the batches already trained are
   * read again to be skipped. `args.initialEpoch` is set by the checkpoint.
   */
  async fitDataset<T extends tf.TensorContainer>(
    dataset: tf.data.Dataset<T> | DatasetLike<T>,
    args: tf.ModelFitDatasetArgs<T>,
  ): Promise<tf.History> {
    checkFitDatasetArgs(args);
    const layout: FitLayout = {
      kind: "fitDataset",
      batchesPerEpoch: args.batchesPerEpoch ?? null,
      samples: null,
      batchSize: null,
      shuffle: null,
    };
    let cursor = this.#cursors.get(dataset) as DataCursor<unknown> | undefined;
    if (!cursor) this.#cursors.set(dataset, (cursor = new DataCursor<unknown>(dataset as DatasetLike<unknown>)));
    const given = cursor;
    return this.#run(
      layout,
      args.epochs,
      args.callbacks,
      () => given,
      (c, initialEpoch, callbacks) =>
        this.#model.fitDataset(c.dataset() as tf.data.Dataset<T>, { ...args, initialEpoch, callbacks }),
    );
  }

  /**
   * `model.fit(x, y, args)`, resumed from the root's newest step, and exact: it trains through
   * `model.fitDataset` over `tensorBatches` of x and y, whose order per epoch derives from the
   * run's seed (`shuffle: true`, the default) or is theirs (`shuffle: false`), since tfjs's own
   * shuffle draws from `Math.random` and fit cannot start inside an epoch. `validationSplit`
   * takes the last samples, as fit does; `stepsPerEpoch`, `validationSteps` and `sampleWeight`
   * (unimplemented by tfjs's fit too) and `initialEpoch` are refused.
   */
  async fit(x: TensorsLike, y: TensorsLike, args: tf.ModelFitArgs = {}): Promise<tf.History> {
    checkFitArgs(args);
    const {
      epochs = 1,
      batchSize = 32,
      shuffle = true,
      validationSplit,
      validationData,
      callbacks,
      verbose,
      ...rest
    } = args;
    const made: tf.Tensor[] = [];
    const slice = (value: TensorsLike, from: number, to: number | undefined): TensorsLike =>
      mapTensors(value, (t) => {
        const part = t.slice(from, (to ?? t.shape[0]!) - from);
        made.push(part);
        return part;
      });
    let train: [TensorsLike, TensorsLike] = [x, y];
    let validation: tf.ModelFitArgs["validationData"] = validationData;
    let samples = tensorBatches(x, y, { batchSize, shuffle: false }).samples;
    if (!validation && validationSplit) {
      // As fit: the last samples validate, taken before any shuffling.
      const at = Math.floor(samples * (1 - validationSplit));
      train = [slice(x, 0, at), slice(y, 0, at)];
      validation = [slice(x, at, undefined), slice(y, at, undefined)] as tf.ModelFitArgs["validationData"];
      samples = at;
    }
    try {
      const layout: FitLayout = { kind: "fit", batchesPerEpoch: null, samples, batchSize, shuffle };
      return await this.#run(
        layout,
        epochs,
        callbacks,
        (seed) => new DataCursor(tensorBatches(train[0], train[1], { batchSize, shuffle, seed })),
        (cursor, initialEpoch, callbacks) =>
          this.#model.fitDataset(cursor.dataset() as tf.data.Dataset<tf.TensorContainer>, {
            ...rest,
            epochs,
            initialEpoch,
            callbacks,
            // fitDataset knows no verbosity 2 (one line per epoch): it logs per batch or not at all.
            ...(verbose === undefined
              ? {}
              : { verbose: Math.min(verbose, 1) as tf.ModelFitDatasetArgs<tf.TensorContainer>["verbose"] }),
            ...(validation ? { validationData: validation, validationBatchSize: batchSize } : {}),
          }),
      );
    } finally {
      for (const t of made) t.dispose();
    }
  }

  /** Waits for the saves in flight and releases the manager (see `CheckpointManager.close`). */
  close(options?: CloseOptions): Promise<JoinResult> {
    return this.manager.close(options);
  }

  async #run(
    layout: FitLayout,
    epochs: number,
    userCallbacks: Callbacks,
    cursorFor: (seed: number) => DataCursor<unknown>,
    train: Train,
  ): Promise<tf.History> {
    if (this.#training)
      throw new CheckpointError("invalid_argument", "this FitCheckpoint is training already: one call at a time");
    if (!this.#model.optimizer)
      throw new CheckpointError(
        "invalid_argument",
        "compile the model (model.compile({ optimizer, loss })) before training it",
      );
    this.#training = true;
    this.#preempted = false;
    try {
      const { position, resumedFrom } = await this.#resume(layout, epochs);
      const cursor = cursorFor(position.seed);
      if (trained(position, epochs, layout.batchesPerEpoch ?? cursor.dataset().size)) {
        this.#log(
          `training under ${this.#where} already ${position.finished ? "finished" : "reached"} step ${position.step} (${progress(position, epochs)}): nothing to train; the model holds that step`,
        );
        return await this.#emptyHistory(epochs);
      }
      if (resumedFrom !== undefined)
        this.#log(`resumed from step ${resumedFrom} under ${this.#where} (${progress(position, epochs)})`);
      position.epochs = epochs;
      position.finished = false;
      cursor.loadStateDict({ ...position.data });
      const seeds = new LayerSeeds(this.#model);
      if (seeds.unseedable.length > 0)
        this.#log(
          `layers ${seeds.unseedable.join(", ")} draw from Math.random, which tfjs does not seed: a resumed run will not match an uninterrupted one bit for bit`,
        );
      const callback = new FitCallback({
        model: this.#model,
        manager: this.manager,
        position,
        cursor,
        every: this.#options.every ?? "epoch",
        seeds,
        resumedFrom,
        log: this.#log,
      });
      const list = userCallbacks === undefined ? [] : Array.isArray(userCallbacks) ? userCallbacks : [userCallbacks];
      try {
        return await train(cursor, position.epoch, [...list, callback] as Callbacks);
      } finally {
        seeds.restore();
        this.#preempted = callback.preempted;
      }
    } finally {
      this.#training = false;
    }
  }

  /**
   * Where training starts: the position this process trained to, if that is the root's newest
   * step; else that step, checked and restored into the model; else a new run.
   */
  async #resume(
    layout: FitLayout,
    epochs: number,
  ): Promise<{ position: FitPosition; resumedFrom: number | undefined }> {
    const latest = await this.manager.latestStep();
    const live = this.#position;
    if (latest === undefined) {
      // Steps of a run this process trained may have been deleted since: a new run, from the model as it is.
      const seed = this.#options.seed ?? Math.floor(Math.random() * 0x7fffffff) + 1;
      this.#position = new FitPosition(layout, seed, epochs);
      return { position: this.#position, resumedFrom: undefined };
    }
    if (live && live.step === latest) {
      checkSameRun(live, layout, this.#options.seed, `step ${latest} under ${this.#where}`);
      return { position: live, resumedFrom: latest };
    }
    const where = `step ${latest} under ${this.#where}`;
    const { position, entries } = await readFitPosition(this.manager, latest, where);
    checkSameRun(position, layout, this.#options.seed, where);
    await restoreTraining(this.manager, latest, this.#model, entries, where);
    this.#position = position;
    return { position, resumedFrom: latest };
  }

  /** What fitDataset resolves when there is nothing to train: a History of no epochs (from tfjs itself). */
  #emptyHistory(epochs: number): Promise<tf.History> {
    const empty = {
      size: 0,
      iterator: async () => ({ next: async () => ({ done: true as const, value: undefined }) }),
    };
    return this.#model.fitDataset(empty as unknown as tf.data.Dataset<tf.TensorContainer>, {
      epochs,
      initialEpoch: epochs,
      verbose: 0,
    });
  }
}

/**
 * A FitCheckpoint over `location` (a path, a URL or a StorageAdapter), with its root listed once
 * so that a root that cannot be read fails here rather than after the first epoch.
 */
export async function cairnCheckpoint(
  model: tf.LayersModel,
  location: string | StorageAdapter,
  options: FitCheckpointOptions = {},
): Promise<FitCheckpoint> {
  const checkpoint = new FitCheckpoint(model, location, options);
  try {
    await checkpoint.manager.latestStep();
  } catch (error) {
    await checkpoint.close().catch(() => undefined);
    throw error;
  }
  return checkpoint;
}
