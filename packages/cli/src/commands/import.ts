import { importSafetensors, readSafetensorsHeader, refuseInsideSource } from "@cairn/core/ops";
import { type CommandSpec, integerOption } from "../command.js";
import { formatBytes } from "../progress-bar.js";
import { refuseVanishingMemory } from "../destination.js";
import { leftNote, withFile, withCheckpointLocation } from "./open.js";

export const importCommand: CommandSpec = {
  name: "import",
  args: "<file.safetensors> <checkpoint>",
  summary: "make a checkpoint from a safetensors file (the reverse of export)",
  help: [
    "A file written by cairn export comes back exactly: key paths, blobs, inline values and user metadata. Any other safetensors file's tensors are keyed by their names split at dots (model.layers.0.weight → model / layers / 0 / weight), as torch names them.",
    "Streamed with bounded memory: each tensor is read from the file in ranges, checksummed and written; metadata.json is written last, so the checkpoint is committed only when complete.",
    "A checkpoint already committed at the destination is replaced only with --force: the new data files are written beside the old ones (names unique to this import), metadata.json is then replaced in one all-or-nothing write, and only then are the old data files deleted. A failure before that leaves the old checkpoint whole and readable.",
  ],
  options: {
    force: { type: "boolean", help: "replace a checkpoint committed at the destination" },
    "block-size": { type: "string", value: "<bytes>", help: "bytes per CRC32C block (default 1048576)" },
  },
  minArgs: 2,
  maxArgs: 2,
  async run(context, [file, url], options) {
    const blockSize = integerOption(options, "block-size");
    refuseVanishingMemory(url!, context.memoryVanishes, "imported checkpoint");
    await refuseInsideSource(file!, url!, "file");
    return withFile(context, file!, (input) =>
      withCheckpointLocation(context, url!, async (location) => {
        const header = await readSafetensorsHeader(input.storage, input.name, input.where);
        const total = header.tensors.reduce((n, t) => n + t.end - t.begin, 0);
        const progress = context.progress("importing", total);
        const result = await importSafetensors(
          { ...input, file: header },
          { storage: location.storage, dir: location.dir },
          {
            signal: context.signal,
            onWrite: (n) => progress.advance(n),
            force: options.force === true,
            ...(blockSize ? { blockSize } : {}),
          },
        );
        progress.finish();
        context.result(
          {
            file: input.where,
            checkpoint: location.where,
            entries: result.entries,
            files: result.files,
            bytes: result.bytes,
            leftFiles: result.leftFiles,
          },
          `imported ${input.where} into ${location.where}: ${result.entries} entries, ${formatBytes(result.bytes)}${leftNote(result.leftFiles)}`,
        );
      }),
    );
  },
};
