import { CheckpointError } from "@cairn/core";
import type { CommandSpec } from "../command.js";
import { formatBytes } from "../progress-bar.js";
import { listSteps, stepsError } from "../steps.js";
import { table, withLocation } from "./open.js";

/** A metric for a table: six significant digits (the --json output keeps full precision). */
export function formatMetric(value: number): string {
  return Number.isFinite(value) ? String(Number(value.toPrecision(6))) : String(value);
}

export const lsCommand: CommandSpec = {
  name: "ls",
  args: "<root>",
  summary: "list the steps under a CheckpointManager root: committed or not, size, time, metrics",
  help: [
    "Steps are the directories <root>/<step>/ a CheckpointManager writes. A step is committed once its metadata.json exists; others are leftovers of saves that failed or are still running (cairn gc removes old ones).",
    "TIME is when a committed step was saved (a leftover: its newest file). METRICS are the metrics it was saved with, to six significant digits (--json has them in full).",
    "A step whose metadata.json cannot be read (damaged, foreign, unreadable) is listed as damaged with the reason, and in --json with error {code, message}; the other steps are listed all the same, and the exit code is then 3 (1 when a step could not be read for another reason than damage).",
  ],
  minArgs: 1,
  maxArgs: 1,
  async run(context, [root]) {
    return withLocation(context, root!, async (location) => {
      const { steps, others } = await listSteps(location.storage);
      if (steps.length === 0 && others === 0) {
        throw new CheckpointError("not_found", `nothing at ${location.where}; check the URL or path`, { context: { path: location.where } });
      }
      const rows = steps.map((s) => [
        String(s.step),
        s.error ? "damaged" : s.committed ? "committed" : "uncommitted",
        formatBytes(s.bytes),
        s.time ?? "-",
        s.error ? s.error.message.replace(/\s*\n\s*/g, " ") : Object.entries(s.metrics).map(([k, v]) => `${k}=${formatMetric(v)}`).join(" "),
      ]);
      const text =
        steps.length === 0
          ? `no steps under ${location.where} (it holds ${others} other object${others === 1 ? "" : "s"}; a single checkpoint? try cairn inspect)`
          : table([["STEP", "STATE", "SIZE", "TIME", "METRICS"], ...rows]);
      context.result({ root: location.where, steps }, text);
      const problems = steps.flatMap((s) => (s.error ? [{ step: s.step, ...s.error }] : []));
      if (problems.length > 0) throw stepsError(problems, `${problems.length} of ${steps.length} steps could not be read`, location.where);
    });
  },
};
