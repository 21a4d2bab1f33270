import { type RetentionOptions, collectGarbage } from "@cairn/manager";
import { UsageError, type CommandSpec, durationOption, integerOption } from "../command.js";
import { stepsError } from "../steps-error.js";
import { withLocation } from "./open.js";

export const gcCommand: CommandSpec = {
  name: "gc",
  args: "<root>",
  summary: "apply the manager's retention rules to a root: delete old steps and leftovers",
  help: [
    "The rules are CheckpointManager's: a step is kept if any rule keeps it (--keep newest or best N, --keep-period, --keep-interval), and the newest committed step is never deleted. Without --keep every committed step is kept and only leftovers go.",
    "Leftovers (step directories without metadata.json) are deleted once their newest file is older than --leftover-age (default 24h), so a save still running elsewhere is never touched.",
    "A step whose metadata.json cannot be read is neither kept nor deleted: it is reported, as is a step that cannot be deleted; the other steps are handled all the same and the exit code is then non-zero (3 when every problem is damage).",
  ],
  options: {
    keep: { type: "string", value: "<n>", help: "keep the newest n committed steps (with --best: the best n)" },
    "keep-period": { type: "string", value: "<n>", help: "also keep every step divisible by n" },
    "keep-interval": {
      type: "string",
      value: "<duration>",
      help: "also keep one step per interval of wall time (e.g. 6h)",
    },
    best: { type: "string", value: "<metric>", help: "rank steps by this saved metric for --keep" },
    "best-mode": { type: "string", value: "max|min", help: "whether a larger (default) or smaller metric is better" },
    "leftover-age": {
      type: "string",
      value: "<duration>",
      help: "delete leftovers older than this (default 24h; 0 deletes every leftover)",
    },
  },
  minArgs: 1,
  maxArgs: 1,
  async run(context, [root], options) {
    const mode = options["best-mode"];
    if (mode !== undefined && mode !== "max" && mode !== "min")
      throw new UsageError(`--best-mode takes max or min, got ${JSON.stringify(mode)}`);
    if (mode !== undefined && options.best === undefined) throw new UsageError("--best-mode needs --best <metric>");
    const metric = options.best as string | undefined;
    const keepInterval = durationOption(options, "keep-interval");
    const keepPeriod = integerOption(options, "keep-period");
    const retention: RetentionOptions = {
      maxToKeep: integerOption(options, "keep") ?? 0,
      ...(keepPeriod ? { keepPeriod } : {}),
      ...(keepInterval ? { keepTimeInterval: keepInterval } : {}),
      ...(metric
        ? {
            bestFn: (metrics: Readonly<Record<string, number>>) =>
              Object.hasOwn(metrics, metric) ? metrics[metric] : undefined,
            bestMode: mode ?? "max",
          }
        : {}),
    };
    const leftoverAge = durationOption(options, "leftover-age") ?? 24 * 3_600_000;
    return withLocation(context, root!, async (location) => {
      const { steps, leftovers, damaged, failed } = await collectGarbage(
        location.storage,
        retention,
        leftoverAge,
        context.now(),
      );
      const lines = [
        ...(steps.length ? [`deleted step${steps.length === 1 ? "" : "s"} ${steps.join(", ")}`] : []),
        ...(leftovers.length ? [`deleted leftover${leftovers.length === 1 ? "" : "s"} ${leftovers.join(", ")}`] : []),
        ...damaged.map((d) => `skipped damaged step ${d.step}: ${d.message}`),
        ...failed.map((f) => `could not delete step ${f.step}: ${f.message}`),
      ];
      context.result(
        { root: location.where, deletedSteps: steps, deletedLeftovers: leftovers, damaged, failed },
        lines.length === 0 ? `nothing to delete under ${location.where}` : lines.join("\n"),
      );
      const problems = [...damaged, ...failed];
      if (problems.length > 0)
        throw stepsError(
          problems,
          `${damaged.length} damaged step(s) skipped, ${failed.length} step(s) not deleted`,
          location.where,
        );
    });
  },
};
