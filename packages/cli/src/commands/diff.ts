import { type CheckpointDiff, type EntryDiff, CheckpointReader, dataBytes, diffCheckpoints } from "@cairn/core/ops";
import type { CommandSpec } from "../command.js";
import { formatMetric } from "../figures.js";
import { table, withCheckpoint } from "./open.js";

function change(e: EntryDiff): string {
  if (e.before)
    return `${e.before.dtype ?? e.before.kind} ${JSON.stringify(e.before.shape ?? [])} → ${e.dtype ?? e.kind} ${JSON.stringify(e.shape ?? [])}`;
  if (e.values) return `${JSON.stringify(e.values.a)} → ${JSON.stringify(e.values.b)}`;
  if (e.changedElements === undefined)
    return e.status === "added" || e.status === "removed"
      ? `${e.dtype ?? e.kind} ${JSON.stringify(e.shape ?? [])}`
      : "";
  const parts = [`${e.changedElements} of ${e.elements} elements`];
  if (e.maxAbsChange !== null && e.maxAbsChange !== undefined) parts.push(`max abs ${formatMetric(e.maxAbsChange)}`);
  if (e.maxRelChange !== null && e.maxRelChange !== undefined) parts.push(`max rel ${formatMetric(e.maxRelChange)}`);
  if (e.nonFiniteChanges) parts.push(`${e.nonFiniteChanges} to or from NaN/Inf`);
  return parts.join(", ");
}

/** The text of a diff: every entry that is not identical, then a count of those that are and how they were told. */
export function diffText(a: string, b: string, diff: CheckpointDiff): string {
  const rows = diff.entries.filter((e) => e.status !== "identical").map((e) => [e.name, e.status, change(e)]);
  const ways: [EntryDiff["by"], string][] = [
    ["reference", "by reference"],
    ["checksum", "by checksum"],
    ["read", "by reading"],
    [undefined, "inline values"],
  ];
  const how = ways
    .map(([by, label]) => [diff.entries.filter((e) => e.status === "identical" && e.by === by).length, label] as const)
    .filter(([n]) => n > 0)
    .map(([n, label]) => `${n} ${label}`);
  const identical = `${diff.identical} identical${how.length > 0 ? ` (${how.join(", ")})` : ""}`;
  return [
    `a: ${a}`,
    `b: ${b}`,
    ...(rows.length > 0 ? [table([["KEY", "STATUS", "CHANGE"], ...rows])] : ["no differences"]),
    `${diff.changed} changed, ${diff.added} added, ${diff.removed} removed, ${identical}`,
  ].join("\n");
}

export const diffCommand: CommandSpec = {
  name: "diff",
  args: "<checkpoint-a> <checkpoint-b>",
  summary: "what changed between two checkpoints, tensor by tensor",
  help: [
    "Lists keys added and removed, kind, dtype or shape changes, and for tensors and blobs of the same dtype and shape whether their bytes changed: identical ones are told without reading a byte where their metadata says so (by reference: an incremental step using its base's bytes; by checksum: the same chunks with the same XXH3-128 content hash, or in checkpoints older than format 2.2 the same CRC32C of every block), the others are read from both sides (every block verified) and compared bit for bit.",
    "For a changed tensor: how many elements changed, the largest absolute change |b - a| and relative change |b - a| / |a| (over elements finite on both sides, a != 0), and how many changed to or from NaN or Inf.",
    "With --json, prints { a, b, identical, changed, added, removed, entries: [{ key, name, status, by, kind, dtype, shape, before, elements, changedElements, maxAbsChange, maxRelChange, nonFiniteChanges, values }] }. cairn ui shows the same diff.",
  ],
  minArgs: 2,
  maxArgs: 2,
  async run(context, [urlA, urlB]) {
    return withCheckpoint(context, urlA!, (locationA, metadataA) =>
      withCheckpoint(context, urlB!, async (locationB, metadataB) => {
        const progress = context.progress("comparing", dataBytes(metadataA) + dataBytes(metadataB));
        const options = { signal: context.signal, onRead: (n: number) => progress.advance(n) };
        const a = new CheckpointReader(locationA.storage, locationA.dir, metadataA, options);
        const b = new CheckpointReader(locationB.storage, locationB.dir, metadataB, options);
        let diff: CheckpointDiff;
        try {
          diff = await diffCheckpoints(a, b, { signal: context.signal });
        } finally {
          await Promise.all([a.close(), b.close()]);
        }
        progress.finish();
        context.result(
          { a: locationA.where, b: locationB.where, ...diff },
          diffText(locationA.where, locationB.where, diff),
        );
      }),
    );
  },
};
