import type * as tf from "@tensorflow/tfjs";
import { CheckpointError } from "@cairn/core";
import type { CheckpointManagerOptions } from "@cairn/manager";
import type { SaveEvery } from "./fit-callback.js";
import { invalid } from "./invalid-argument.js";

/** Keep the steps with the best value of a metric, as Keras's `ModelCheckpoint(monitor, mode)`. */
export interface BestOptions {
  /** A metric of tfjs's logs: `loss`, `val_loss`, `acc`, `val_acc`… */
  readonly monitor: string;
  /** Whether lower or higher is better; `"auto"` (the default): higher for accuracies, lower otherwise. */
  readonly mode?: "min" | "max" | "auto";
}

export interface FitCheckpointOptions extends Omit<
  CheckpointManagerOptions,
  "bestFn" | "bestMode" | "processGroup" | "readOnly"
> {
  /** When to save: `"epoch"` (the default) at every epoch's end, or every n batches. */
  readonly every?: SaveEvery;
  /**
   * With `maxToKeep`, keep the steps with the best `monitor` instead of the newest (the newest
   * is kept too, to resume from). Steps saved without that metric (a batch save has no
   * validation metrics) rank last.
   */
  readonly best?: BestOptions;
  /**
   * The run's seed: `fit`'s data order and the dropout masks of every batch derive from it. A new
   * run without one draws one; a resumed run uses the one its checkpoint holds.
   */
  readonly seed?: number;
  /** Where to say that the run resumed, finished already or stopped (default `console.info`); `false` for nowhere. */
  readonly log?: ((message: string) => void) | false;
}

/** The options of the CheckpointManager a FitCheckpoint saves through, `every` and `best` checked. */
export function managerOptionsOf(options: FitCheckpointOptions): CheckpointManagerOptions {
  if (typeof options !== "object" || options === null) throw invalid("cairnCheckpoint's options", "an object", options);
  const { every, best, seed, log, ...manager } = options;
  for (const name of ["processGroup", "readOnly"] as const) {
    if ((manager as CheckpointManagerOptions)[name] !== undefined)
      throw invalid(
        `cairnCheckpoint option ${name}`,
        "undefined: a fit run trains in one process and saves",
        "a value",
      );
  }
  if (
    every !== undefined &&
    every !== "epoch" &&
    !(typeof every === "number" && Number.isSafeInteger(every) && every > 0)
  )
    throw invalid("cairnCheckpoint option every", 'a positive integer (batches) or "epoch"', every);
  if (seed !== undefined && (typeof seed !== "number" || !Number.isSafeInteger(seed)))
    throw invalid("cairnCheckpoint option seed", "a safe integer", seed);
  if (log !== undefined && log !== false && typeof log !== "function")
    throw invalid("cairnCheckpoint option log", "a function or false", log);
  const preemptionSignals =
    manager.preemptionSignals ?? manager.preemption?.signals ?? (["SIGTERM", "SIGINT"] as const);
  if (best === undefined) return { ...manager, preemptionSignals };
  if (typeof best !== "object" || best === null || typeof best.monitor !== "string" || best.monitor === "")
    throw invalid("cairnCheckpoint option best", "{ monitor: a metric name, mode? }", best);
  const { monitor, mode = "auto" } = best;
  if (mode !== "min" && mode !== "max" && mode !== "auto")
    throw invalid("cairnCheckpoint option best.mode", '"min", "max" or "auto"', mode);
  if (!manager.maxToKeep)
    throw new CheckpointError(
      "invalid_argument",
      "cairnCheckpoint option best keeps the maxToKeep best steps: give maxToKeep too (an integer ≥ 1)",
    );
  const bestMode = mode === "auto" ? (monitor.includes("acc") ? "max" : "min") : mode;
  // A step without the metric ranks below every step with it, and is deleted first.
  const worst = bestMode === "min" ? Number.MAX_VALUE : -Number.MAX_VALUE;
  return {
    ...manager,
    preemptionSignals,
    bestMode,
    bestFn: (metrics) => (typeof metrics[monitor] === "number" ? metrics[monitor] : worst),
  };
}

/** `fitDataset`'s arguments as cairnCheckpoint takes them: it sets `initialEpoch` itself. */
export function checkFitDatasetArgs<T>(args: tf.ModelFitDatasetArgs<T>): void {
  if (typeof args !== "object" || args === null) throw invalid("fitDataset's args", "an object with epochs", args);
  checkEpochs(args.epochs, "fitDataset");
  const perEpoch = args.batchesPerEpoch;
  if (perEpoch !== undefined && !(Number.isSafeInteger(perEpoch) && perEpoch > 0))
    throw invalid("fitDataset's batchesPerEpoch", "a positive integer or undefined", perEpoch);
  refuseInitialEpoch(args.initialEpoch, "fitDataset");
}

/** `fit`'s arguments: only what training through seeded batches can honour. */
export function checkFitArgs(args: tf.ModelFitArgs): void {
  if (typeof args !== "object" || args === null) throw invalid("fit's args", "an object", args);
  if (args.epochs !== undefined) checkEpochs(args.epochs, "fit");
  refuseInitialEpoch(args.initialEpoch, "fit");
  if (args.shuffle !== undefined && typeof args.shuffle !== "boolean")
    throw invalid("fit's shuffle", "true (a seeded order per epoch, the default) or false", args.shuffle);
  for (const name of ["stepsPerEpoch", "validationSteps", "sampleWeight"] as const) {
    if (args[name] !== undefined)
      throw invalid(`fit's ${name}`, "undefined (tfjs's fit does not implement it either)", "a value");
  }
  const split = args.validationSplit;
  if (split !== undefined && !(typeof split === "number" && split >= 0 && split < 1))
    throw invalid("fit's validationSplit", "a number in [0, 1)", split);
}

function checkEpochs(epochs: unknown, fn: string): void {
  if (typeof epochs !== "number" || !Number.isSafeInteger(epochs) || epochs < 1)
    throw invalid(`${fn}'s epochs`, "a positive integer", epochs);
}

function refuseInitialEpoch(initialEpoch: unknown, fn: string): void {
  if (initialEpoch !== undefined)
    throw invalid(`${fn}'s initialEpoch`, "undefined: the checkpoint decides where training resumes", initialEpoch);
}
