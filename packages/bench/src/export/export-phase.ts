// One phase of the export benchmark, run by `runChild` in its own process so its peak RSS is its own.
// Usage: export-phase.ts make <dir> whole|columns <tensors> <MiB each>
//        export-phase.ts export <checkpoint dir> <layout dir> <shard bytes>
//        export-phase.ts cp <checkpoint dir> <copy dir> read-back|no-read-back
import { randomFillSync } from "node:crypto";
import { dirname, basename } from "node:path";
import { type StateDict, hostTensor, readMetadata, save, shardedTensor } from "@cairn/core";
import { CheckpointReader, copyCheckpoint, exportSafetensorsLayout, writeCheckpoint } from "@cairn/core/ops";
import { openStorage } from "@cairn/core/storage";
import "@cairn/storage-local";
import { MiB, sendResult } from "../support.js";

/** Columns of each tensor's rows; a tensor of `bytes` float32 has bytes / 4 / COLUMNS rows. */
const COLUMNS = 4096;

const [mode, source, target, ...rest] = process.argv.slice(2);

/**
 * The source checkpoint: `whole`, tensors of one chunk each, streamed from random bytes (a 4 GiB
 * state is never in memory); `columns`, tensors saved as three column shards, as three
 * column-sharded ranks save them.
 */
async function make(dir: string, layout: string, tensors: number, bytes: number): Promise<void> {
  const rows = bytes / 4 / COLUMNS;
  if (layout === "whole") {
    const storage = await openStorage(dirname(dir));
    const entries = Array.from({ length: tensors }, (_, i) => ({
      kind: "tensor" as const,
      key: ["model", `layer${i}`, "weight"],
      dtype: "float32" as const,
      shape: [rows, COLUMNS],
      byteLength: bytes,
      read: async (_offset: number, length: number) => randomFillSync(new Uint8Array(length)),
    }));
    await writeCheckpoint(storage, basename(dir), entries);
    await storage.close();
    return;
  }
  const cuts = [0, 1365, 2730, COLUMNS];
  const state: StateDict = {};
  for (let i = 0; i < tensors; i++) {
    state[`layer${i}`] = shardedTensor(
      "float32",
      [rows, COLUMNS],
      cuts.slice(0, -1).map((start, r) => {
        const t = hostTensor("float32", [rows, cuts[r + 1]! - start]);
        randomFillSync(new Uint8Array(t.data.buffer));
        return { offsets: [0, start], tensor: t };
      }),
    );
  }
  await save({ model: state }, dir);
}

/** Exports or copies `source` to `target`, timed from a process with everything imported and both locations open. */
async function measure(): Promise<{
  bytes: number;
  seconds: number;
  cpuSeconds: number;
  baselineRss: number;
  minorFaults: number;
}> {
  const storage = await openStorage(dirname(source!));
  const name = basename(source!);
  const metadata = await readMetadata({ storage, path: name });
  const out = await openStorage(dirname(target!));
  const bytes = metadata.entries.reduce(
    (n, e) => n + (e.kind === "value" ? 0 : e.chunks.reduce((m, c) => m + c.byteLength, 0)),
    0,
  );
  const baselineRss = process.memoryUsage().rss;
  const cpu = process.cpuUsage();
  const faults = process.resourceUsage().minorPageFault;
  const started = performance.now();
  if (mode === "export") {
    const reader = new CheckpointReader(storage, name, metadata);
    await exportSafetensorsLayout(
      reader,
      { storage: out, dir: basename(target!), where: target! },
      { maxShardBytes: Number(rest[0]) },
    );
    await reader.close();
  } else {
    await copyCheckpoint(
      { storage, dir: name, metadata, where: source! },
      { storage: out, dir: basename(target!), where: target! },
      { readBack: rest[0] === "read-back" },
    );
  }
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  await storage.close();
  await out.close();
  return {
    bytes,
    seconds,
    cpuSeconds: (used.user + used.system) / 1e6,
    baselineRss,
    minorFaults: process.resourceUsage().minorPageFault - faults,
  };
}

if (mode === "make") {
  await make(source!, target!, Number(rest[0]), Number(rest[1]) * MiB);
  sendResult({});
} else if (mode === "export" || mode === "cp") {
  sendResult(await measure());
} else {
  throw new Error(`unknown mode ${mode}`);
}
