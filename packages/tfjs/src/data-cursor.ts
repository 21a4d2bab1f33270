import { CheckpointError, type StateDict, type Stateful, tfjsModule } from "@cairn/core";
import { invalid } from "./invalid-argument.js";

/** One pass over a dataset, as `tf.data.Dataset.iterator()` gives it. */
export interface DataIterator<T> {
  next(): Promise<IteratorResult<T>>;
}

/** What a DataCursor reads: a `tf.data.Dataset`, or anything with `iterator()`. */
export interface DatasetLike<T> {
  iterator(): Promise<DataIterator<T>>;
  readonly size?: number | null;
}

/**
 * A dataset that opens any of its passes at any element directly (`tensorBatches` is one), so a
 * cursor reaches a saved position without reading the elements before it.
 */
export interface SeekableDataset<T> extends DatasetLike<T> {
  /** Pass `index` (what the index-th `iterator()` call would give, from 0) from its element `skip` on. */
  iteratorAt(index: number, skip: number): Promise<DataIterator<T>>;
}

/** Where a DataCursor is, as its checkpoint holds it. */
export interface DataPosition {
  /** Passes over the dataset begun so far (`iterator()` calls), the current one included. */
  readonly iterations: number;
  /** Elements taken from the current pass. */
  readonly taken: number;
  /** Whether the current pass may hold more elements (false once it reported done). */
  readonly open: boolean;
}

const START: DataPosition = { iterations: 0, taken: 0, open: false };

function isSeekable<T>(dataset: DatasetLike<T>): dataset is SeekableDataset<T> {
  return typeof (dataset as Partial<SeekableDataset<T>>).iteratorAt === "function";
}

/** Frees the tensors of an element the cursor skips; elements without tensors (or without tfjs) need nothing. */
async function dispose(element: unknown): Promise<void> {
  if (typeof element !== "object" || element === null) return;
  const tf = (await tfjsModule().catch(() => undefined)) as { dispose?: (c: unknown) => void } | undefined;
  tf?.dispose?.(element);
}

/** The position in a checkpoint, checked: it comes from storage. */
export function dataPositionOf(stateDict: StateDict, where: string): DataPosition {
  const { iterations, taken, open } = stateDict;
  const count = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
  if (!count(iterations) || !count(taken) || typeof open !== "boolean" || (iterations === 0 && (open || taken > 0))) {
    throw new CheckpointError(
      "mismatch",
      `${where} is not a data position ({ iterations, taken, open }): ${JSON.stringify({ iterations, taken, open })}`,
      { context: { key: where } },
    );
  }
  return { iterations, taken, open };
}

/**
 * A position in a dataset that is part of a checkpoint (`Stateful`): which pass over the data a
 * run is in and how many elements of it were taken. Restored, the cursor continues with the very
 * next element an uninterrupted run would have read. A `tf.data` dataset cannot seek, so the
 * cursor gets there by beginning the passes before it again (`iterator()`, which advances a
 * seeded `shuffle` as the first run did) and taking the elements already trained on; a
 * `SeekableDataset` opens the position directly. This is exact when a pass depends only on how
 * many passes came before it: `tf.data` datasets do, with `shuffle(n, seed)` seeded.
 *
 * Use `next()` in a hand-written loop, or `dataset()` for `model.fitDataset`. Throws `mismatch`
 * when the data ends before the saved position (not the data the run was checkpointed with),
 * and `invalid_argument` when a dataset that cannot seek would have to go back to a pass it
 * already began in this process (build it again to resume).
 */
export class DataCursor<T> implements Stateful {
  readonly #dataset: DatasetLike<T>;
  #position: DataPosition = START;
  /** The pass being read; undefined before the first and after a restore. */
  #current: DataIterator<T> | undefined;
  /** Passes begun on the dataset in this process (`iterator()` calls), replays included. */
  #calls = 0;

  constructor(dataset: DatasetLike<T>) {
    if (typeof dataset !== "object" || dataset === null || typeof dataset.iterator !== "function")
      throw invalid("DataCursor's dataset", "a tf.data.Dataset or an object with iterator()", dataset);
    this.#dataset = dataset;
  }

  get position(): DataPosition {
    return this.#position;
  }

  /** The next element, beginning the next pass when one ends; where it sits: pass and index, from 0. */
  async next(): Promise<{ value: T; iteration: number; index: number }> {
    // A pass that ends right away is tried once more: two empty passes in a row mean the data is empty.
    for (let attempt = 0; attempt < 2; attempt++) {
      const result = await this.#pull(await this.#bind());
      if (!result.done)
        return { value: result.value, iteration: this.#position.iterations - 1, index: this.#position.taken - 1 };
    }
    throw new CheckpointError("invalid_argument", "the dataset of a DataCursor yielded no elements in a whole pass");
  }

  /**
   * The cursor's data as a dataset for `model.fitDataset`: each `iterator()` takes up the pass in
   * progress if it is open, else begins the next, on its first `next()` (fitDataset asks for an
   * iterator it never reads before its first epoch; that one costs nothing).
   */
  dataset(): DatasetLike<T> & { readonly size: number } {
    const size = this.#dataset.size ?? null;
    return {
      size: size as number,
      iterator: async () => {
        let bound: Promise<DataIterator<T>> | undefined;
        return {
          next: async () => {
            const pass = await (bound ??= this.#bind());
            if (pass !== this.#current)
              throw new CheckpointError(
                "invalid_argument",
                "an iterator of a DataCursor's dataset was read after a later pass began; read one pass at a time",
              );
            return this.#pull(pass);
          },
        };
      },
    };
  }

  stateDict(): StateDict {
    return { ...this.#position };
  }

  loadStateDict(stateDict: StateDict): void {
    const position = dataPositionOf(stateDict, "the data position");
    const here = this.#position;
    // Already there (a run going on in this process): keep reading the pass in progress.
    if (
      this.#current &&
      here.iterations === position.iterations &&
      here.taken === position.taken &&
      here.open === position.open
    )
      return;
    this.#current = undefined;
    this.#position = position;
  }

  /** The pass to read: the one in progress while it is open, else the next, reached from wherever the cursor is. */
  async #bind(): Promise<DataIterator<T>> {
    const at = this.#position;
    if (this.#current && at.open) return this.#current;
    const [index, skip] = at.open ? [at.iterations - 1, at.taken] : [at.iterations, 0];
    const pass = await this.#open(index, skip);
    this.#current = pass;
    this.#position = { iterations: index + 1, taken: skip, open: true };
    return pass;
  }

  async #open(index: number, skip: number): Promise<DataIterator<T>> {
    const dataset = this.#dataset;
    if (isSeekable(dataset)) {
      this.#calls = index + 1;
      return dataset.iteratorAt(index, skip);
    }
    if (index < this.#calls) {
      throw new CheckpointError(
        "invalid_argument",
        `the position is in pass ${index + 1} over the dataset, which already began pass ${this.#calls} in this process and cannot go back: build the dataset again to resume there`,
      );
    }
    // Each pass begun advances what decides the next one (tf.data's seeded shuffle): begin the skipped ones too.
    for (; this.#calls < index; this.#calls++) await dataset.iterator();
    const pass = await dataset.iterator();
    this.#calls++;
    for (let taken = 0; taken < skip; taken++) {
      const result = await pass.next();
      if (result.done) {
        throw new CheckpointError(
          "mismatch",
          `pass ${index + 1} over the dataset ended after ${taken} elements, but the saved position is ${skip} elements into it: this is not the data the run was checkpointed with, or its shuffle is not seeded`,
        );
      }
      await dispose(result.value);
    }
    return pass;
  }

  async #pull(pass: DataIterator<T>): Promise<IteratorResult<T>> {
    const result = await pass.next();
    const at = this.#position;
    this.#position = result.done ? { ...at, open: false } : { ...at, taken: at.taken + 1 };
    return result;
  }
}
