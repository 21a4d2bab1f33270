import { CheckpointError } from "@cairn/core";
import type { CommandSpec } from "../command.js";
import { formatBytes } from "../progress-bar.js";
import { listSteps } from "../steps.js";
import { table, withLocation } from "./open.js";

export const lsCommand: CommandSpec = {
  name: "ls",
  args: "<root>",
  summary: "list the steps under a CheckpointManager root: committed or not, size, time, metrics",
  help: [
    "Steps are the directories <root>/<step>/ a CheckpointManager writes. A step is committed once its metadata.json exists; others are leftovers of saves that failed or are still running (cairn gc removes old ones).",
    "TIME is when a committed step was saved (a leftover: its newest file). METRICS are the metrics it was saved with.",
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
        s.committed ? "committed" : "uncommitted",
        formatBytes(s.bytes),
        s.time ?? "-",
        Object.entries(s.metrics).map(([k, v]) => `${k}=${v}`).join(" "),
      ]);
      const text =
        steps.length === 0
          ? `no steps under ${location.where} (it holds ${others} other object${others === 1 ? "" : "s"}; a single checkpoint? try cairn inspect)`
          : table([["STEP", "STATE", "SIZE", "TIME", "METRICS"], ...rows]);
      context.result({ root: location.where, steps }, text);
    });
  },
};
