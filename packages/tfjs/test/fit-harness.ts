// Runs the fit fixture through cairnCheckpoint in this process, with preemption notices sent
// through an injected signal target at chosen batches: each call builds a new model and dataset,
// as a new process would, so a call after a stopped one is a resume.
import { EventEmitter } from "node:events";
import * as tf from "@tensorflow/tfjs";
import { type FitCheckpointOptions, cairnCheckpoint } from "../src/index.js";
import { BATCH, fitDataset, fitModel, fitTensors, weightCrcs } from "./fit-fixture.js";

export type FitMode = "fit" | "fitDataset";

export interface TrainOptions extends Omit<FitCheckpointOptions, "signalTarget" | "log"> {
  /** Send SIGTERM right before this batch (counted over the whole run, from 0): the run checkpoints after it and stops. */
  readonly stopBefore?: number;
  readonly epochs?: number;
  readonly model?: tf.LayersModel;
  /** More arguments for fit (or, of those it shares, fitDataset); `callbacks` replace the harness's (no `stopBefore` then). */
  readonly args?: Partial<tf.ModelFitArgs>;
}

export interface TrainResult {
  readonly crcs: string[];
  readonly preempted: boolean;
  readonly step: number | undefined;
  readonly history: tf.History;
  readonly logs: string[];
  readonly committed: number[];
}

export async function train(root: string, mode: FitMode, options: TrainOptions = {}): Promise<TrainResult> {
  const { stopBefore, epochs = 3, model = fitModel(), args = {}, ...checkpointOptions } = options;
  const signals = new EventEmitter();
  const logs: string[] = [];
  const committed: number[] = [];
  const ckpt = await cairnCheckpoint(model, root, {
    seed: 7,
    ...checkpointOptions,
    signalTarget: signals,
    log: (line) => logs.push(line),
  });
  ckpt.manager.on("committed", ({ step }) => committed.push(step));
  const callbacks = args.callbacks ?? {
    // Before batch g, g batches are trained: the step the checkpoint counts.
    onBatchBegin: async () => {
      if (stopBefore !== undefined && ckpt.step === stopBefore) signals.emit("SIGTERM", "SIGTERM");
    },
  };
  try {
    let history: tf.History;
    if (mode === "fit") {
      const { xs, ys } = fitTensors();
      try {
        history = await ckpt.fit(xs, ys, { epochs, batchSize: BATCH, verbose: 0, ...args, callbacks });
      } finally {
        tf.dispose([xs, ys]);
      }
    } else {
      history = await ckpt.fitDataset(await fitDataset(), { epochs, verbose: 0, callbacks });
    }
    return { crcs: await weightCrcs(model), preempted: ckpt.preempted, step: ckpt.step, history, logs, committed };
  } finally {
    await ckpt.close();
  }
}
