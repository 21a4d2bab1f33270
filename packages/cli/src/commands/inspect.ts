import { displayKey, valueOf } from "@cairn/core";
import type { CommandSpec } from "../command.js";
import { formatBytes } from "../progress-bar.js";
import { dataBytes, table, withCheckpoint } from "./open.js";

export const inspectCommand: CommandSpec = {
  name: "inspect",
  args: "<checkpoint>",
  summary: "show a checkpoint's entries: kind, dtype, global shape, chunks and files",
  help: [
    "Reads only metadata.json. Values saved inline (numbers, strings…) are shown with their value.",
    "With --json, prints { checkpoint, format, version, worldSize, createdAt, blockSize, bytes, files, entries, user }, where each entry has its key path, display name, kind, dtype, shape, and chunks (offsets, sizes, file, byteOffset, byteLength).",
  ],
  minArgs: 1,
  maxArgs: 1,
  async run(context, [url]) {
    return withCheckpoint(context, url!, async (location, metadata) => {
      const entries = metadata.entries.map((e) =>
        e.kind === "value"
          ? { key: e.key, name: displayKey(e.key), kind: e.kind, value: e.special === undefined ? valueOf(e) : null, ...(e.special ? { special: e.special } : {}) }
          : {
              key: e.key,
              name: displayKey(e.key),
              kind: e.kind,
              dtype: e.kind === "tensor" ? e.dtype : "uint8",
              shape: e.kind === "tensor" ? e.shape : [e.byteLength],
              chunks: e.chunks.map(({ offsets, sizes, file, byteOffset, byteLength }) => ({ offsets, sizes, file, byteOffset, byteLength })),
              files: [...new Set(e.chunks.map((c) => c.file))],
            },
      );
      const bytes = dataBytes(metadata);
      const json = {
        checkpoint: location.where,
        format: metadata.format,
        version: metadata.version,
        worldSize: metadata.worldSize,
        createdAt: metadata.createdAt,
        blockSize: metadata.checksum.blockSize,
        bytes,
        files: Object.entries(metadata.files).map(([name, f]) => ({ name, rank: f.rank, size: f.size })),
        entries,
        user: metadata.user,
      };
      const rows = entries.map((e) =>
        "value" in e
          ? [e.name, e.kind, "-", "-", "-", "special" in e ? String(e.special) : JSON.stringify(e.value)]
          : [e.name, e.kind, e.dtype, JSON.stringify(e.shape), String(e.chunks.length), e.files.join(" ")],
      );
      const text = [
        `${location.where}: ${metadata.format} ${metadata.version}, ${metadata.worldSize} rank${metadata.worldSize === 1 ? "" : "s"}, committed ${metadata.createdAt}`,
        `${metadata.entries.length} entries, ${Object.keys(metadata.files).length} data files, ${formatBytes(bytes)}, CRC32C blocks of ${formatBytes(metadata.checksum.blockSize)}`,
        ...(Object.keys(metadata.user).length > 0 ? [`user metadata: ${JSON.stringify(metadata.user).slice(0, 300)}`] : []),
        "",
        table([["KEY", "KIND", "DTYPE", "SHAPE", "CHUNKS", "FILES / VALUE"], ...rows]),
      ].join("\n");
      context.result(json, text);
    });
  },
};
