import { CheckpointReader, dataBytes, refuseInsideSource, writeCheckpoint } from "@cairn/core/ops";
import type { CommandSpec } from "../command.js";
import { refuseVanishingMemory } from "../destination.js";
import { formatBytes } from "../progress-bar.js";
import { leftNote, withCheckpoint, withCheckpointLocation, withFile, withLocation } from "./open.js";

// @cairn/tfjs is imported when a conversion runs: importing it loads tfjs-core and registers its URL routers.
export const fromTfjsCommand: CommandSpec = {
  name: "from-tfjs",
  args: "<model.json> <checkpoint>",
  summary: "make a checkpoint from a tfjs model.json and its weight files",
  help: [
    'Each weight becomes a tensor entry keyed weights/<tfjs weight name>; the topology, format and the rest of model.json become the checkpoint\'s user metadata ("tfjs"), so cairnIO and cairn to-tfjs give the model back. Weight files are read in ranges (bounded memory); quantized weights are refused.',
    "A checkpoint already committed at the destination is replaced only with --force, as cairn import does.",
  ],
  options: {
    force: { type: "boolean", help: "replace a checkpoint committed at the destination" },
  },
  minArgs: 2,
  maxArgs: 2,
  async run(context, [model, url], options) {
    refuseVanishingMemory(url!, context.memoryVanishes, "converted checkpoint");
    await refuseInsideSource(model!, url!, "file");
    return withFile(context, model!, (input) =>
      withCheckpointLocation(context, url!, async (location) => {
        const { tfjsModelEntries } = await import("@cairn/tfjs");
        const { entries, user } = await tfjsModelEntries(input.storage, input.name, input.where);
        const progress = context.progress(
          "converting",
          entries.reduce((n, e) => n + e.byteLength, 0),
        );
        const result = await writeCheckpoint(location.storage, location.dir, entries, {
          user,
          signal: context.signal,
          force: options.force === true,
          onWrite: (n) => progress.advance(n),
        });
        progress.finish();
        context.result(
          {
            model: input.where,
            checkpoint: location.where,
            weights: result.entries,
            bytes: result.bytes,
            leftFiles: result.leftFiles,
          },
          `converted ${input.where} into ${location.where}: ${result.entries} weights, ${formatBytes(result.bytes)}${leftNote(result.leftFiles)}`,
        );
      }),
    );
  },
};

export const toTfjsCommand: CommandSpec = {
  name: "to-tfjs",
  args: "<checkpoint> <dir>",
  summary: "write the tfjs model a checkpoint holds as <dir>/model.json + weights.bin",
  help: [
    "For checkpoints saved with cairnIO or made by cairn from-tfjs. The result loads with tf.loadLayersModel (file:// with tfjs-node, or served over http). Weights are streamed, every block checked; model.json is written last.",
    "The directory must lie outside the checkpoint and hold neither file: an existing model is never replaced (delete it first).",
  ],
  minArgs: 2,
  maxArgs: 2,
  async run(context, [url, dir]) {
    refuseVanishingMemory(dir!, context.memoryVanishes, "model");
    await refuseInsideSource(url!, dir!, "checkpoint");
    return withCheckpoint(context, url!, (location, metadata) =>
      withLocation(context, dir!, async (out) => {
        const { MODEL_FILE, WEIGHTS_FILE, writeTfjsModel } = await import("@cairn/tfjs");
        const reader = new CheckpointReader(location.storage, location.dir, metadata, { signal: context.signal });
        const progress = context.progress("converting", dataBytes(metadata));
        let result;
        try {
          result = await writeTfjsModel(reader, location.where, out, {
            signal: context.signal,
            onWrite: (n) => progress.advance(n),
          });
        } finally {
          await reader.close();
        }
        progress.finish();
        context.result(
          {
            checkpoint: location.where,
            model: `${out.where}/${MODEL_FILE}`,
            weights: result.weights,
            bytes: result.bytes,
          },
          `wrote ${out.where}/${MODEL_FILE} and ${WEIGHTS_FILE}: ${result.weights} weights, ${formatBytes(result.bytes)}`,
        );
      }),
    );
  },
};
