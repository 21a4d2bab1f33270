import { CheckpointError, isGone } from "@cairn/core";
import { deleteCheckpoint } from "@cairn/core/ops";
import { parseStep, removeSteps } from "@cairn/manager";
import { UsageError, type CommandSpec } from "../command.js";
import { checkpointMetadata } from "../location.js";
import { stepsError } from "../steps-error.js";
import { withCheckpointLocation, withLocation } from "./open.js";
import { count } from "../progress-bar.js";

export const rmCommand: CommandSpec = {
  name: "rm",
  args: "<checkpoint> | <root> <step>...",
  summary: "delete a checkpoint, or steps under a CheckpointManager root",
  help: [
    "cairn rm <root> <step>... deletes those steps, committed or leftovers, as the manager does: metadata.json first, so an interrupted delete leaves an uncommitted leftover (never a damaged committed step), which cairn gc removes. A step that cannot be deleted does not stop the others: it is reported and the exit code is non-zero.",
    "cairn rm <checkpoint> deletes one committed checkpoint: its metadata.json, then the data files it lists, except those another checkpoint beside it references (an incremental step's base files); other files there are left alone.",
  ],
  minArgs: 1,
  maxArgs: Infinity,
  async run(context, [url, ...stepArgs]) {
    const steps = stepArgs.map((s) => {
      const step = parseStep(s);
      if (step === undefined) throw new UsageError(`steps are non-negative decimal integers, got ${JSON.stringify(s)}`);
      return step;
    });
    if (steps.length > 0) {
      return withLocation(context, url!, async (location) => {
        const { deleted, failed } = await removeSteps(location.storage, steps);
        context.result(
          { root: location.where, deleted, failed },
          deleted.length === 0
            ? `deleted no step under ${location.where}`
            : `deleted step${deleted.length === 1 ? "" : "s"} ${deleted.join(", ")} under ${location.where}`,
        );
        if (failed.length > 0)
          throw stepsError(failed, `could not delete ${failed.length} of ${steps.length} steps`, location.where);
      });
    }
    return withCheckpointLocation(context, url!, async (location) => {
      const metadata = await checkpointMetadata(location, context.signal).catch((error: unknown) => {
        if (isGone(error)) {
          throw new CheckpointError(
            error.code,
            `${error.message}; to delete steps name them (cairn rm <root> <step>...); leftovers go with cairn gc <root>`,
            {
              cause: error,
              context: error.context,
            },
          );
        }
        throw error;
      });
      const { deleted, kept } = await deleteCheckpoint(location.storage, location.dir, metadata, context.signal);
      const files = deleted.length - 1;
      context.result(
        { checkpoint: location.where, deleted, kept },
        `deleted ${location.where} (${count(files, "data file")}${kept.length > 0 ? `; kept ${kept.length} that other steps reference` : ""})`,
      );
    });
  },
};
