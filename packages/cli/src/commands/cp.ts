import { copyCheckpoint, dataBytes, refuseInsideSource } from "@cairn/core/ops";
import type { CommandSpec } from "../command.js";
import { refuseVanishingMemory } from "../destination.js";
import { formatBytes, count } from "../progress-bar.js";
import { leftNote, withCheckpoint, withCheckpointLocation } from "./open.js";

export const cpCommand: CommandSpec = {
  name: "cp",
  args: "<src> <dst>",
  summary: "copy a checkpoint between storages (file ↔ memory ↔ s3 ↔ gs), verified, committed last",
  help: [
    "Streams every data file, checking each byte against the source's CRC32C checksums on the way (a damaged source is never copied), reads the copy back and checks it, then writes metadata.json last with an atomic create: the copy is committed only once complete. On failure the copy's files are removed.",
    "The copy's data files get new names unique to this copy; everything else in metadata.json (entries, checksums, createdAt, user metadata) is the source's. An incremental step is materialized: its copy holds every byte it needs, including those it referenced in its base.",
    "The destination must lie outside the source. A checkpoint already committed there is replaced only with --force: the copy's data files are written beside the old ones, metadata.json is then replaced in one all-or-nothing write, and only then are the old data files deleted; a failure before that leaves the old checkpoint whole and readable.",
    "memory:// storage lives as long as the cairn process: a copy to memory:// must be used by a later command of the same run (--then), else it is refused.",
  ],
  options: {
    force: { type: "boolean", help: "replace a checkpoint committed at the destination" },
    "no-read-back": {
      type: "boolean",
      help: "skip reading the copy back before committing (the bytes sent are still checked)",
    },
  },
  minArgs: 2,
  maxArgs: 2,
  async run(context, [src, dst], options) {
    refuseVanishingMemory(dst!, context.memoryVanishes, "copy");
    await refuseInsideSource(src!, dst!, "checkpoint");
    return withCheckpoint(context, src!, (source, metadata) =>
      withCheckpointLocation(context, dst!, async (destination) => {
        const readBack = options["no-read-back"] !== true;
        const progress = context.progress("copying", dataBytes(metadata) * (readBack ? 2 : 1));
        const result = await copyCheckpoint(
          { storage: source.storage, dir: source.dir, metadata, where: source.where },
          { storage: destination.storage, dir: destination.dir, where: destination.where },
          {
            signal: context.signal,
            readBack,
            force: options.force === true,
            onWrite: (n) => progress.advance(n),
            onReadBack: (n) => progress.advance(n),
          },
        );
        progress.finish();
        context.result(
          {
            source: source.where,
            destination: destination.where,
            files: result.files,
            bytes: result.bytes,
            readBack,
            leftFiles: result.leftFiles,
          },
          `copied ${source.where} to ${destination.where}: ${count(result.files, "data file")}, ${formatBytes(result.bytes)}${readBack ? ", read back and verified" : ""}${leftNote(result.leftFiles)}`,
        );
      }),
    );
  },
};
