import { importSafetensors, readSafetensorsLayout, refuseInsideSource } from "@cairn/core/ops";
import { type CommandSpec, integerOption } from "../command.js";
import { formatBytes } from "../progress-bar.js";
import { refuseVanishingMemory } from "../destination.js";
import { leftNote, withCheckpointLocation } from "./open.js";

export const importCommand: CommandSpec = {
  name: "import",
  args: "<file.safetensors | dir | index.json> <checkpoint>",
  summary: "make a checkpoint from a safetensors file or a Hugging Face layout (the reverse of export)",
  help: [
    "A file written by cairn export comes back exactly: key paths, blobs, inline values and user metadata. Any other safetensors file's tensors are keyed by their names split at dots (model.layers.0.weight → model / layers / 0 / weight), as torch names them.",
    "A Hugging Face layout (model-00001-of-00004.safetensors … and model.safetensors.index.json, as transformers and cairn export --hf write it) is given as its directory or its index; a directory holding only model.safetensors works too. The index and every shard's header are checked before anything is written: a shard outside the directory, missing, or disagreeing with the index, a tensor in two shards, or a metadata.total_size that does not match is damage (exit 3).",
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
    return withCheckpointLocation(context, file!, (input) =>
      withCheckpointLocation(context, url!, async (location) => {
        const layout = await readSafetensorsLayout(input.storage, input.dir, input.where, context.signal);
        const total = layout.entries.reduce((n, e) => n + (e.kind === "value" ? 0 : e.byteLength), 0);
        const progress = context.progress("importing", total);
        const result = await importSafetensors(
          { storage: input.storage, layout },
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
