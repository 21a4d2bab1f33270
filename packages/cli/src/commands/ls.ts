import { CheckpointError } from "@cairn/core";
import type { CommandSpec } from "../command.js";
import { formatMetric } from "../figures.js";
import { formatBytes } from "../progress-bar.js";
import { type StepListing, listSteps, mergeTiers } from "@cairn/manager";
import { stepsError } from "../steps-error.js";
import type { CommandContext } from "../command.js";
import { table, withLocation } from "./open.js";

/** The WRITTEN and REFERENCED columns: bytes in the step's own directory, bytes it uses of earlier steps' files. */
function sizeCells(s: StepListing): [string, string] {
  return [formatBytes(s.bytes), s.referencedBytes > 0 ? formatBytes(s.referencedBytes) : "-"];
}

/** The METRICS column: a step's metrics, or why it could not be read. */
function metricsCell(s: StepListing): string {
  if (s.state === "referenced") return `files used by step ${s.referencedBy.join(", ")}`;
  if (s.error) return s.error.message.replace(/\s*\n\s*/g, " ");
  return Object.entries(s.metrics)
    .map(([k, v]) => `${k}=${formatMetric(v)}`)
    .join(" ");
}

export const lsCommand: CommandSpec = {
  name: "ls",
  args: "<root> [<root>...]",
  summary:
    "list the steps under a CheckpointManager root: committed or not, size, time, metrics; with several roots (tiers), where each step lives",
  help: [
    "Steps are the directories <root>/<step>/ a CheckpointManager writes. A step is committed once its metadata.json exists; uncommitted ones are leftovers of saves that failed or are still running (cairn gc removes old ones); referenced ones are deleted steps whose files kept incremental steps still use (they go with the last step using them).",
    "WRITTEN is what a step holds in its own directory; REFERENCED what an incremental step uses of earlier steps' files instead of writing it (the two add up to what a restore reads). TIME is when a committed step was saved (a leftover: its newest file). METRICS are the metrics it was saved with, to six significant digits (--json has them in full).",
    "With several roots, the tiers of a tiered CheckpointManager fastest first (cairn ls file:///local/ckpt s3://bucket/run), one STATE column per tier says where each step lives; SIZE, TIME and METRICS come from the first tier that holds it committed.",
    "A step whose metadata.json cannot be read (damaged, foreign, unreadable) is listed as damaged with the reason, and in --json with error {code, message}; the other steps are listed all the same, and the exit code is then 3 (1 when a step could not be read for another reason than damage).",
  ],
  minArgs: 1,
  maxArgs: 16,
  async run(context, roots) {
    if (roots.length > 1) return listTiers(context, roots);
    const root = roots[0];
    return withLocation(context, root!, async (location) => {
      const { steps, others } = await listSteps(location.storage, { signal: context.signal });
      if (steps.length === 0 && others === 0) {
        throw new CheckpointError("not_found", `nothing at ${location.where}; check the URL or path`, {
          context: { path: location.where },
        });
      }
      const rows = steps.map((s) => [String(s.step), s.state, ...sizeCells(s), s.time ?? "-", metricsCell(s)]);
      const text =
        steps.length === 0
          ? `no steps under ${location.where} (it holds ${others} other object${others === 1 ? "" : "s"}; a single checkpoint? try cairn inspect)`
          : table([["STEP", "STATE", "WRITTEN", "REFERENCED", "TIME", "METRICS"], ...rows]);
      context.result({ root: location.where, steps }, text);
      const problems = steps.flatMap((s) => (s.error ? [{ step: s.step, ...s.error }] : []));
      if (problems.length > 0)
        throw stepsError(problems, `${problems.length} of ${steps.length} steps could not be read`, location.where);
    });
  },
};

/** `cairn ls <tier0> <tier1> ...`: one row per step found on any tier, one state column per tier. */
async function listTiers(context: CommandContext, roots: readonly string[]): Promise<void> {
  const tiers = await Promise.all(
    roots.map((root) =>
      withLocation(context, root, async (location) => ({
        root: location.where,
        ...(await listSteps(location.storage, { signal: context.signal })),
      })),
    ),
  );
  const merged = mergeTiers(tiers);
  if (merged.length === 0)
    throw new CheckpointError(
      "not_found",
      `no steps under any of ${tiers.map((t) => t.root).join(", ")}; check the URLs or paths`,
      { context: { path: tiers[0]!.root } },
    );
  const rows = merged.map(({ step, states, listing: best }) => [
    String(step),
    ...states.map((state) => state ?? "-"),
    ...sizeCells(best),
    best.time ?? "-",
    metricsCell(best),
  ]);
  const header = ["STEP", ...tiers.map((_, i) => `TIER ${i}`), "WRITTEN", "REFERENCED", "TIME", "METRICS"];
  const json = {
    tiers: tiers.map((t) => ({ root: t.root, steps: t.steps })),
    steps: merged.map(({ step, states }) => ({ step, tiers: states.map((state) => state ?? "-") })),
  };
  context.result(json, `${tiers.map((t, i) => `tier ${i}: ${t.root}`).join("\n")}\n${table([header, ...rows])}`);
  const problems = tiers.flatMap((t) => t.steps.flatMap((s) => (s.error ? [{ step: s.step, ...s.error }] : [])));
  if (problems.length > 0)
    throw stepsError(problems, `${problems.length} steps could not be read`, tiers.map((t) => t.root).join(", "));
}
