import { type CheckpointMetadata, CheckpointError, isCheckpointError } from "@cairn/core";
import { METADATA_FILE } from "@cairn/core/format";
import { checkpointBytes, verifyCheckpoint } from "@cairn/core/ops";
import type { CommandSpec } from "../command.js";
import { checkpointMetadata } from "../location.js";
import { formatBytes, count } from "../progress-bar.js";
import { withCheckpointLocation } from "./open.js";

export const verifyCommand: CommandSpec = {
  name: "verify",
  args: "<checkpoint>",
  summary: "read every byte of a checkpoint and check it against its CRC32C checksums",
  help: [
    "Checks metadata.json (a damaged or hostile one, e.g. holding a key like __proto__, is damage), each data file's size and header checksum, every checksum block of every chunk, and that each tensor's chunks tile it exactly. Damage does not stop the check: every damaged entry is named.",
    "Exit code 0 when everything matches, 3 when anything is damaged (the damaged keys are printed, and named on stderr).",
  ],
  minArgs: 1,
  maxArgs: 1,
  async run(context, [url]) {
    return withCheckpointLocation(context, url!, async (location) => {
      let metadata: CheckpointMetadata;
      try {
        metadata = await checkpointMetadata(location, context.signal);
      } catch (error) {
        if (!isCheckpointError(error, "corrupt")) throw error;
        const damaged = [{ file: METADATA_FILE, problem: error.message }];
        context.result(
          { checkpoint: location.where, ok: false, entries: 0, files: 0, bytes: 0, damagedKeys: [], damaged },
          `DAMAGED: ${location.where}: its ${METADATA_FILE} cannot be read\n  ${error.message}`,
        );
        throw error;
      }
      const { own, referenced } = checkpointBytes(metadata);
      const progress = context.progress("verifying", own + referenced);
      const report = await verifyCheckpoint(location.storage, location.dir, metadata, {
        signal: context.signal,
        onRead: (n) => progress.advance(n),
      });
      progress.finish();
      const ok = report.damaged.length === 0;
      const summary = `${count(report.entries, "entry", "entries")}, ${count(report.files, "data file")}, ${formatBytes(report.bytes)} read`;
      context.result(
        {
          checkpoint: location.where,
          ok,
          entries: report.entries,
          files: report.files,
          bytes: report.bytes,
          damagedKeys: report.damagedKeys,
          damaged: report.damaged,
        },
        ok
          ? `ok: ${location.where}: ${summary}, every checksum matches`
          : [`DAMAGED: ${location.where}: ${summary}`, ...report.damaged.map((d) => `  ${d.problem}`)].join("\n"),
      );
      if (!ok) {
        const what =
          report.damagedKeys.length > 0
            ? `damaged entries: ${report.damagedKeys.join(", ")}`
            : report.damaged[0]!.problem;
        throw new CheckpointError(
          "corrupt",
          `${location.where} is damaged (${what}); restore it from another copy or an earlier step`,
          { context: { path: location.where } },
        );
      }
    });
  },
};
