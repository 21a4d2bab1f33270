import { CheckpointReader, exportSafetensors, refuseInsideSource } from "@cairn/core/ops";
import type { CommandSpec } from "../command.js";
import { formatBytes } from "../progress-bar.js";
import { refuseVanishingMemory } from "../destination.js";
import { withCheckpoint, withFile } from "./open.js";

export const exportCommand: CommandSpec = {
  name: "export",
  args: "<checkpoint> <file.safetensors>",
  summary: "consolidate a (sharded) checkpoint into one safetensors file",
  help: [
    "Like PyTorch DCP's dcp_to_torch_save: every tensor whole, in global row-major order, named by its dotted key, whatever chunks it was saved in. Streamed with bounded memory (8 MiB of a tensor at a time), every block read checked against its CRC32C.",
    'Key paths, blobs, inline values and user metadata go in the file\'s __metadata__ ("cairn"), so cairn import rebuilds the checkpoint exactly; other tools (safetensors, transformers) see plain tensors.',
    "The file may be a path or any storage URL; it is written all at once (no partial file on failure). It must lie outside the checkpoint, and an existing file is replaced only with --force (the old one stays whole until the new one is complete).",
  ],
  options: {
    force: { type: "boolean", help: "replace the file if it exists" },
  },
  minArgs: 2,
  maxArgs: 2,
  async run(context, [url, file], options) {
    refuseVanishingMemory(file!, context.memoryVanishes, "exported file");
    await refuseInsideSource(url!, file!, "checkpoint");
    return withCheckpoint(context, url!, (location, metadata) =>
      withFile(context, file!, async (out) => {
        const reader = new CheckpointReader(location.storage, location.dir, metadata, { signal: context.signal });
        const total = metadata.entries.reduce(
          (n, e) => n + (e.kind === "value" ? 0 : e.chunks.reduce((m, c) => m + c.byteLength, 0)),
          0,
        );
        const progress = context.progress("exporting", total);
        let result;
        try {
          result = await exportSafetensors(
            reader,
            { storage: out.storage, name: out.name, where: out.where },
            { signal: context.signal, force: options.force === true, onWrite: (n) => progress.advance(n) },
          );
        } finally {
          await reader.close();
        }
        progress.finish();
        context.result(
          { checkpoint: location.where, file: out.where, tensors: result.tensors, bytes: result.bytes },
          `exported ${location.where} to ${out.where}: ${result.tensors} tensors, ${formatBytes(result.bytes)}`,
        );
      }),
    );
  },
};
