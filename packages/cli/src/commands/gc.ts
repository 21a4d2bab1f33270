import type { RetentionOptions } from "@cairn/manager";
import { UsageError, type CommandSpec, durationOption, integerOption } from "../command.js";
import { collectGarbage } from "../steps.js";
import { withLocation } from "./open.js";

export const gcCommand: CommandSpec = {
  name: "gc",
  args: "<root>",
  summary: "apply the manager's retention rules to a root: delete old steps and leftovers",
  help: [
    "The rules are CheckpointManager's: a step is kept if any rule keeps it (--keep newest or best N, --keep-period, --keep-interval), and the newest committed step is never deleted. Without --keep every committed step is kept and only leftovers go.",
    "Leftovers (step directories without metadata.json) are deleted once their newest file is older than --leftover-age (default 24h), so a save still running elsewhere is never touched.",
  ],
  options: {
    keep: { type: "string", value: "<n>", help: "keep the newest n committed steps (with --best: the best n)" },
    "keep-period": { type: "string", value: "<n>", help: "also keep every step divisible by n" },
    "keep-interval": { type: "string", value: "<duration>", help: "also keep one step per interval of wall time (e.g. 6h)" },
    best: { type: "string", value: "<metric>", help: "rank steps by this saved metric for --keep" },
    "best-mode": { type: "string", value: "max|min", help: "whether a larger (default) or smaller metric is better" },
    "leftover-age": { type: "string", value: "<duration>", help: "delete leftovers older than this (default 24h; 0 deletes every leftover)" },
  },
  minArgs: 1,
  maxArgs: 1,
  async run(context, [root], options) {
    const mode = options["best-mode"];
    if (mode !== undefined && mode !== "max" && mode !== "min") throw new UsageError(`--best-mode takes max or min, got ${JSON.stringify(mode)}`);
    if (mode !== undefined && options.best === undefined) throw new UsageError("--best-mode needs --best <metric>");
    const metric = options.best as string | undefined;
    const keepInterval = durationOption(options, "keep-interval");
    const keepPeriod = integerOption(options, "keep-period");
    const retention: RetentionOptions = {
      maxToKeep: integerOption(options, "keep") ?? 0,
      ...(keepPeriod ? { keepPeriod } : {}),
      ...(keepInterval ? { keepTimeInterval: keepInterval } : {}),
      ...(metric ? { bestFn: (metrics: Readonly<Record<string, number>>) => metrics[metric], bestMode: mode ?? "max" } : {}),
    };
    const leftoverAge = durationOption(options, "leftover-age") ?? 24 * 3_600_000;
    return withLocation(context, root!, async (location) => {
      const { steps, leftovers } = await collectGarbage(location.storage, retention, leftoverAge, context.now());
      const text =
        steps.length + leftovers.length === 0
          ? `nothing to delete under ${location.where}`
          : [
              ...(steps.length ? [`deleted step${steps.length === 1 ? "" : "s"} ${steps.join(", ")}`] : []),
              ...(leftovers.length ? [`deleted leftover${leftovers.length === 1 ? "" : "s"} ${leftovers.join(", ")}`] : []),
            ].join("\n");
      context.result({ root: location.where, deletedSteps: steps, deletedLeftovers: leftovers }, text);
    });
  },
};
