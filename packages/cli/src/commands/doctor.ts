import { CheckpointError } from "@cairn/core";
import { type ExaminedCopy, type TiersExamination, examineTiers } from "@cairn/manager";
import type { CommandSpec } from "../command.js";
import { type Location, openLocation } from "../location.js";
import { count, formatBytes } from "../progress-bar.js";
import { table } from "./open.js";

/** A copy's cell: where it stands on that tier and whether it verified. */
function cell(copy: ExaminedCopy | undefined): string {
  if (copy === undefined) return "-";
  if (copy.error) return `unverified (${copy.error.code})`;
  if (copy.verified === true) return "verified";
  if (copy.verified === false) return "DAMAGED";
  return copy.listing.state;
}

/** The text report: one row per step, one column per tier, then the figures a person acts on. */
function report(wheres: readonly string[], x: TiersExamination): string {
  const rows = x.steps.map((s) => [
    String(s.step),
    ...s.tiers.map(cell),
    s.referencedBy.length > 0 ? s.referencedBy.join(",") : "-",
  ]);
  const header = ["STEP", ...wheres.map((_, i) => (wheres.length === 1 ? "STATE" : `TIER ${i}`)), "REFERENCED BY"];
  const problems = x.steps.flatMap((s) =>
    s.tiers.flatMap((c, tier) => [
      ...(c?.damaged ?? []).map((d) => `  step ${s.step}${wheres.length > 1 ? ` tier ${tier}` : ""}: ${d.problem}`),
      ...(c?.error ? [`  step ${s.step}${wheres.length > 1 ? ` tier ${tier}` : ""}: ${c.error.message}`] : []),
    ]),
  );
  const last = wheres.length - 1;
  const durable =
    x.newestDurable === undefined
      ? `no step verified on ${wheres.length > 1 ? `the last tier (${last})` : "it"}: everything is at risk`
      : `newest durable step${wheres.length > 1 ? ` (tier ${last})` : ""}: ${x.newestDurable}, ${count(x.stepsAtRisk ?? 0, "step")} and ${x.secondsAtRisk?.toFixed(1)} s behind the newest`;
  const newestOk = x.newestStep !== undefined && x.newestStep === x.newestVerified;
  return [
    ...(wheres.length > 1 ? wheres.map((w, i) => `tier ${i}: ${w}`) : [wheres[0]!]),
    table([header, ...rows]),
    "",
    x.newestStep === undefined
      ? "no committed step"
      : `newest step: ${x.newestStep}, ${newestOk ? "verified" : "DOES NOT VERIFY"}`,
    `newest verified step: ${x.newestVerified ?? "none"}`,
    durable,
    ...(x.leftovers.length === 0
      ? ["no leftovers or temp files"]
      : [
          "leftovers (cairn gc removes them once older than --leftover-age):",
          ...x.leftovers.map(
            (l) =>
              `  ${wheres.length > 1 ? `tier ${l.tier} ` : ""}step ${l.step}: ${count(l.objects, "object")}, ${formatBytes(l.bytes)}${l.tempObjects > 0 ? `, of which ${count(l.tempObjects, "temp file")} of killed or running writes (${formatBytes(l.tempBytes)})` : ""}${l.time ? `, newest ${l.time}` : ""}`,
          ),
        ]),
    ...(problems.length > 0 ? ["problems:", ...problems] : []),
  ].join("\n");
}

export const doctorCommand: CommandSpec = {
  name: "doctor",
  args: "<root> [<root>...]",
  summary:
    "check a CheckpointManager root (and its tiers): every step verified, damage, references, loss-budget distance, leftovers",
  help: [
    "Reads every step directory under the root (several roots: a tiered manager's tiers, fastest first) and verifies every committed copy once, every byte against its CRC32C (as cairn verify). Read-only: nothing is written, repaired or deleted.",
    "For each step and tier it reports verified, DAMAGED (the problems are listed), uncommitted (a leftover), referenced (a deleted step whose files kept steps use) or unverified (storage failed), and which steps use its files. Then the newest step and whether it verifies, the newest verified step, the newest step verified on the last tier (durable) and how many steps and seconds the newest is ahead of it (the loss-budget distance), and the leftovers and temp files of killed writes (cairn gc removes them).",
    "Exit code 0 when the newest step verifies on some tier (even if older steps are damaged: they are listed), 3 when it is damaged everywhere it is, 1 when it could not be read for another reason.",
    "With --json, prints { tiers, steps: [{ step, verified, referencedBy, tiers: [null | { state, verified, damaged, error, bytes, referencedBytes }] }], newestStep, newestVerified, newestDurable, stepsAtRisk, secondsAtRisk, leftovers: [{ tier, step, objects, bytes, tempObjects, tempBytes, time }], ok }; absent figures are null.",
  ],
  minArgs: 1,
  maxArgs: 16,
  async run(context, roots) {
    const locations: Location[] = [];
    try {
      for (const root of roots) locations.push(await openLocation(root, context.storageOptions));
      const wheres = locations.map((l) => l.where);
      const x = await examineTiers(
        locations.map((l) => l.storage),
        { signal: context.signal },
      );
      if (x.steps.length === 0 && x.tiers.every((t) => t.others === 0))
        throw new CheckpointError("not_found", `nothing at ${wheres.join(", ")}; check the URL or path`, {
          context: { path: wheres[0] },
        });
      const ok = x.newestStep !== undefined && x.newestStep === x.newestVerified;
      const json = {
        tiers: wheres,
        steps: x.steps.map((s) => ({
          step: s.step,
          verified: s.verified,
          referencedBy: s.referencedBy,
          tiers: s.tiers.map((c) =>
            c === undefined
              ? null
              : {
                  state: c.listing.state,
                  verified: c.verified ?? null,
                  damaged: c.damaged ?? [],
                  error: c.error ? { code: c.error.code, message: c.error.message } : null,
                  bytes: c.listing.bytes,
                  referencedBytes: c.listing.referencedBytes,
                },
          ),
        })),
        newestStep: x.newestStep ?? null,
        newestVerified: x.newestVerified ?? null,
        newestDurable: x.newestDurable ?? null,
        stepsAtRisk: x.stepsAtRisk ?? null,
        secondsAtRisk: x.secondsAtRisk ?? null,
        leftovers: x.leftovers,
        ok,
      };
      context.result(json, report(wheres, x));
      if (ok || x.newestStep === undefined) return;
      const newest = x.steps.find((s) => s.step === x.newestStep)!;
      const failure = newest.tiers.find((c) => c?.error)?.error;
      const damage = newest.tiers.flatMap((c) => c?.damaged ?? [])[0];
      throw new CheckpointError(
        failure && !damage ? (failure.code === "internal" ? "storage" : failure.code) : "corrupt",
        `the newest step ${x.newestStep} does not verify on any tier (${damage?.problem ?? failure?.message}); the newest verified step is ${x.newestVerified ?? "none"}`,
        { context: { path: wheres[0], step: x.newestStep } },
      );
    } finally {
      await Promise.all(locations.map((l) => l.close()));
    }
  },
};
