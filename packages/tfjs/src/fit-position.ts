import { CheckpointError, type JsonPrimitive, type StateDict, type Stateful, displayKey } from "@cairn/core";
import type { EntryMetadata } from "@cairn/core/format";
import { type DataPosition, dataPositionOf } from "./data-cursor.js";

/** The key of the fit position in a checkpoint: `{ model, optim, fit }`. */
export const FIT_KEY = "fit";
/** The layout of the `fit` entry; a checkpoint with another one is refused, never guessed at. */
const FORMAT = 1;

/** What the run's data is, to refuse a checkpoint of another run's data. */
export interface FitLayout {
  readonly kind: "fit" | "fitDataset";
  /** fitDataset's `batchesPerEpoch`, or null for passes to the end of the data. */
  readonly batchesPerEpoch: number | null;
  /** fit: the training samples (after a validation split), batch size and whether shuffled. */
  readonly samples: number | null;
  readonly batchSize: number | null;
  readonly shuffle: boolean | null;
}

/**
 * Where a `model.fit` / `fitDataset` run is, the `fit` entry of its checkpoints (`Stateful`):
 * the step (batches trained since the run began), the epoch and the batches trained in it, the
 * epochs asked for, whether the run finished, the run's seed (data order and dropout masks),
 * what its data is, and the data cursor's position. `loadStateDict` checks every value, as
 * they come from storage, and throws `mismatch` for anything else.
 */
export class FitPosition implements Stateful {
  step = 0;
  epoch = 0;
  batch = 0;
  epochs = 0;
  finished = false;
  seed = 0;
  layout: FitLayout;
  data: DataPosition = { iterations: 0, taken: 0, open: false };

  constructor(layout: FitLayout, seed: number, epochs: number) {
    this.layout = layout;
    this.seed = seed;
    this.epochs = epochs;
  }

  /** A copy, to save a position that training moves on from. */
  snapshot(): FitPosition {
    const copy = new FitPosition(this.layout, this.seed, this.epochs);
    Object.assign(copy, { step: this.step, epoch: this.epoch, batch: this.batch, finished: this.finished });
    copy.data = this.data;
    return copy;
  }

  stateDict(): StateDict {
    return {
      format: FORMAT,
      kind: this.layout.kind,
      step: this.step,
      epoch: this.epoch,
      batch: this.batch,
      epochs: this.epochs,
      finished: this.finished,
      seed: this.seed,
      layout: {
        batchesPerEpoch: this.layout.batchesPerEpoch,
        samples: this.layout.samples,
        batchSize: this.layout.batchSize,
        shuffle: this.layout.shuffle,
      },
      data: { ...this.data },
    };
  }

  loadStateDict(stateDict: StateDict): void {
    const { format, kind, step, epoch, batch, epochs, finished, seed, layout, data } = stateDict;
    if (format !== FORMAT) throw bad("format", format, `${FORMAT}`);
    if (kind !== "fit" && kind !== "fitDataset") throw bad("kind", kind, '"fit" or "fitDataset"');
    const count = (name: string, v: unknown): number => {
      if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) throw bad(name, v, "an integer ≥ 0");
      return v;
    };
    const nullableCount = (name: string, v: unknown): number | null => (v === null ? null : count(name, v));
    if (typeof finished !== "boolean") throw bad("finished", finished, "true or false");
    if (typeof seed !== "number" || !Number.isSafeInteger(seed)) throw bad("seed", seed, "a safe integer");
    if (!isRecord(layout)) throw bad("layout", layout, "an object");
    if (!isRecord(data)) throw bad("data", data, "an object");
    const shuffle = layout.shuffle;
    if (shuffle !== null && typeof shuffle !== "boolean") throw bad("layout.shuffle", shuffle, "true, false or null");
    this.layout = {
      kind,
      batchesPerEpoch: nullableCount("layout.batchesPerEpoch", layout.batchesPerEpoch),
      samples: nullableCount("layout.samples", layout.samples),
      batchSize: nullableCount("layout.batchSize", layout.batchSize),
      shuffle,
    };
    this.step = count("step", step);
    this.epoch = count("epoch", epoch);
    this.batch = count("batch", batch);
    this.epochs = count("epochs", epochs);
    this.finished = finished;
    this.seed = seed;
    this.data = dataPositionOf(data, `${FIT_KEY}.data`);
  }

  /**
   * The fit position of a checkpoint, from its metadata's entries (values are stored inline, so
   * nothing else is read). Throws `mismatch` naming the keys when the checkpoint has no fit
   * position, or one of another layout.
   */
  static fromEntries(entries: readonly EntryMetadata[], where: string): FitPosition {
    const expected = new FitPosition(
      { kind: "fit", batchesPerEpoch: null, samples: null, batchSize: null, shuffle: null },
      0,
      0,
    );
    const paths = leafPaths(expected.stateDict());
    const saved = new Map<string, JsonPrimitive>();
    const extra: string[] = [];
    for (const entry of entries) {
      if (entry.key[0] !== FIT_KEY) continue;
      const id = JSON.stringify(entry.key.slice(1));
      if (entry.kind !== "value" || !paths.has(id) || entry.special !== undefined) extra.push(displayKey(entry.key));
      else saved.set(id, (entry.value ?? null) as JsonPrimitive);
    }
    if (saved.size === 0 && extra.length === 0) {
      throw new CheckpointError(
        "mismatch",
        `${where} has no ${FIT_KEY} entry: it was not saved by cairnCheckpoint's fit or fitDataset (a hand-written loop saves no data position); use another root`,
      );
    }
    const missing = [...paths.keys()].filter((id) => !saved.has(id)).map((id) => paths.get(id)!);
    if (missing.length > 0 || extra.length > 0) {
      throw new CheckpointError(
        "mismatch",
        `${where} holds a ${FIT_KEY} entry of another layout (${[
          missing.length > 0 ? `missing ${missing.join(", ")}` : "",
          extra.length > 0 ? `unexpected ${extra.join(", ")}` : "",
        ]
          .filter(Boolean)
          .join("; ")}): it was saved by another version or another program; use another root`,
      );
    }
    const stateDict: StateDict = Object.create(null) as StateDict;
    for (const [id, value] of saved) setPath(stateDict, JSON.parse(id) as string[], value);
    expected.loadStateDict(stateDict);
    return expected;
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function bad(name: string, value: unknown, expected: string): CheckpointError {
  return new CheckpointError(
    "mismatch",
    `the checkpoint's ${FIT_KEY}.${name} is ${JSON.stringify(value) ?? String(value)}, not ${expected}`,
    { context: { key: `${FIT_KEY}.${name}` } },
  );
}

/** Every leaf's path below the root, as JSON (for lookups) → dotted (for messages). */
function leafPaths(stateDict: StateDict, prefix: string[] = [], into = new Map<string, string>()): Map<string, string> {
  for (const [key, value] of Object.entries(stateDict)) {
    const path = [...prefix, key];
    if (isRecord(value)) leafPaths(value as StateDict, path, into);
    else into.set(JSON.stringify(path), displayKey([FIT_KEY, ...path]));
  }
  return into;
}

/** Sets a value at a path known to be one of `leafPaths` (so keys are ours, never storage's). */
function setPath(root: StateDict, path: readonly string[], value: JsonPrimitive): void {
  let node = root;
  for (const key of path.slice(0, -1)) node = (node[key] ??= Object.create(null) as StateDict) as StateDict;
  node[path[path.length - 1]!] = value;
}
