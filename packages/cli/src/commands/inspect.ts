import { checkpointFingerprint } from "@cairn/core/format";
import { inspectCheckpoint } from "@cairn/core/ops";
import type { CommandSpec } from "../command.js";
import { formatBytes, count } from "../progress-bar.js";
import { table, withCheckpoint } from "./open.js";

export const inspectCommand: CommandSpec = {
  name: "inspect",
  args: "<checkpoint>",
  summary: "show a checkpoint's entries: kind, dtype, global shape, chunks and files",
  help: [
    "Reads only metadata.json. Values saved inline (numbers, strings…) are shown with their value.",
    "Bytes are what a load reads: its own data files, and of an incremental step's files in earlier steps (referencedBytes) only the chunks it uses.",
    "With --json, prints { checkpoint, format, version, worldSize, createdAt, blockSize, bytes, ownBytes, referencedBytes, files, entries, user, fingerprint }, where each entry has its key path, display name, kind, dtype, shape, and chunks (offsets, sizes, file, byteOffset, byteLength, blockSize, hash).",
    "FINGERPRINT is a hash over the content hashes of every tensor chunk: two checkpoints with the same one hold the same tensors, byte for byte, in the same chunks. Checkpoints saved before content hashes (format 2.1 or older) have none.",
  ],
  minArgs: 1,
  maxArgs: 1,
  async run(context, [url]) {
    return withCheckpoint(context, url!, async (location, metadata) => {
      const summary = inspectCheckpoint(metadata);
      const fingerprint = (await checkpointFingerprint(metadata)) ?? null;
      const { entries } = summary;
      const rows = entries.map((e) =>
        "value" in e
          ? [e.name, e.kind, "-", "-", "-", "special" in e ? String(e.special) : JSON.stringify(e.value)]
          : [e.name, e.kind, e.dtype, JSON.stringify(e.shape), String(e.chunks.length), e.files.join(" ")],
      );
      const text = [
        `${location.where}: ${summary.format} ${summary.version}, ${summary.worldSize} rank${summary.worldSize === 1 ? "" : "s"}, committed ${summary.createdAt}`,
        `${count(entries.length, "entry", "entries")}, ${count(summary.files.length, "data file")}, ${formatBytes(summary.bytes)}${summary.referencedBytes > 0 ? ` (${formatBytes(summary.ownBytes)} its own, ${formatBytes(summary.referencedBytes)} referenced in earlier steps' files)` : ""}, CRC32C blocks of up to ${formatBytes(summary.blockSize)}`,
        `fingerprint: ${fingerprint ?? "none (saved before content hashes)"}`,
        ...(Object.keys(summary.user).length > 0
          ? [`user metadata: ${JSON.stringify(summary.user).slice(0, 300)}`]
          : []),
        "",
        table([["KEY", "KIND", "DTYPE", "SHAPE", "CHUNKS", "FILES / VALUE"], ...rows]),
      ].join("\n");
      context.result({ checkpoint: location.where, ...summary, fingerprint }, text);
    });
  },
};
