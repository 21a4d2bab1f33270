// One process of the resume suite, run by `runChild`. usage:
//   resume-child.ts save <root> <tensors> <bytes each>
//   resume-child.ts resume <root> <tensors> <bytes each> restore-first|reads-first warm|cold
//   resume-child.ts sequence <root> <tensors> <bytes each> <restores>
// `resume` is what a restarted job does: initialise its state (every page touched), then a fresh
// manager's latestStep() + restore(); beside it, in the same process, the plain reads of the same
// files into the same memory. `cold` drops the page cache before each (needs root).
import { open } from "node:fs/promises";
import { join } from "node:path";
import { type HostTensor, type StateDict, readMetadata } from "@cairn/core";
import { CheckpointManager } from "@cairn/manager";
import { type ProcessSpent, measured } from "../process-stats.js";
import { MiB, dropCaches, sendResult } from "../support.js";
import { buildState, bytesOf, crcSecondsOf } from "../local/state-spec.js";

/** Bytes per read of the plain reads, as `dd bs=16M`. */
const READ_BYTES = 16 * MiB;

export interface ResumeRun {
  readonly restore: ProcessSpent;
  readonly reads: ProcessSpent;
  /** Seconds the state took to initialise (allocate and touch), before either. */
  readonly initSeconds: number;
  /** Seconds one thread took to CRC32C the restored state afterwards: a verified restore's limit. */
  readonly crcSeconds: number;
}

export interface SequenceRun {
  readonly restores: readonly ProcessSpent[];
}

/** `tensors` float32 tensors of `bytes` each: random bytes to save, or zeroed targets with every page touched. */
function state(tensors: number, bytes: number, fill: boolean): Record<string, HostTensor> {
  return buildState({ big: tensors, bigBytes: bytes, small: 0, smallBytes: 0 }, fill);
}

/** `latestStep()` + `restore()` on a fresh manager, as a job's restart does. */
async function restore(root: string, sd: StateDict): Promise<void> {
  const manager = new CheckpointManager(root, 1, { checkpointOnPreemption: false });
  try {
    const step = await manager.latestStep();
    if (step === undefined) throw new Error(`no step under ${root}`);
    await manager.restore(step, sd);
  } finally {
    await manager.close();
  }
}

/**
 * What `cat` or `dd bs=16M` does, landing where the bytes belong: every data file read front to
 * back, one after another, in 16 MiB reads, each tensor's bytes into its target. Nothing verified.
 */
async function plainReads(dir: string, sd: Record<string, HostTensor>): Promise<void> {
  const metadata = await readMetadata(dir);
  const byFile = new Map<string, { offset: number; into: Uint8Array }[]>();
  for (const entry of metadata.entries) {
    if (entry.kind !== "tensor") continue;
    const chunk = entry.chunks[0]!;
    const parts = byFile.get(chunk.file) ?? [];
    parts.push({ offset: chunk.byteOffset, into: bytesOf(sd[entry.key.join(".")]!) });
    byFile.set(chunk.file, parts);
  }
  for (const [file, parts] of [...byFile].sort(([a], [b]) => (a < b ? -1 : 1))) {
    const handle = await open(join(dir, file), "r");
    try {
      for (const { offset, into } of parts.sort((a, b) => a.offset - b.offset)) {
        for (let at = 0; at < into.byteLength;) {
          const { bytesRead } = await handle.read(into, at, Math.min(READ_BYTES, into.byteLength - at), offset + at);
          if (bytesRead === 0) throw new Error(`${file} ended early`);
          at += bytesRead;
        }
      }
    } finally {
      await handle.close();
    }
  }
}

/** A few bytes of every tensor, to check that the restore and the plain reads put the same bytes in place. */
function fingerprint(sd: Record<string, HostTensor>): string {
  return Object.values(sd)
    .map((t) => {
      const b = bytesOf(t);
      return [0, b.byteLength >> 1, b.byteLength - 1].map((i) => b[i]).join(",");
    })
    .join(";");
}

const [mode, root, tensorsArg, bytesArg, ...rest] = process.argv.slice(2) as [
  string,
  string,
  string,
  string,
  ...string[],
];
const tensors = Number(tensorsArg);
const bytes = Number(bytesArg);
if (mode === "save") {
  const manager = new CheckpointManager(root, 1, { checkpointOnPreemption: false });
  await manager.save(1, state(tensors, bytes, true));
  await manager.close();
  sendResult({});
} else if (mode === "resume") {
  const [order, cache] = rest;
  const started = performance.now();
  const sd = state(tensors, bytes, false);
  const initSeconds = (performance.now() - started) / 1000;
  const spent: Partial<Record<"restore" | "reads", ProcessSpent>> = {};
  const prints: string[] = [];
  for (const what of order === "reads-first" ? (["reads", "restore"] as const) : (["restore", "reads"] as const)) {
    if (cache === "cold" && !(await dropCaches())) throw new Error("cannot drop the page cache (not root?)");
    spent[what] = await measured(() => (what === "restore" ? restore(root, sd) : plainReads(join(root, "1"), sd)));
    prints.push(fingerprint(sd));
  }
  if (prints[0] !== prints[1]) throw new Error("the restore and the plain reads left different bytes");
  const crcSeconds = crcSecondsOf(sd);
  sendResult({ restore: spent.restore!, reads: spent.reads!, initSeconds, crcSeconds } satisfies ResumeRun);
} else if (mode === "sequence") {
  const sd = state(tensors, bytes, false);
  const manager = new CheckpointManager(root, 1, { checkpointOnPreemption: false });
  const restores: ProcessSpent[] = [];
  for (let i = 0; i < Number(rest[0]); i++) {
    restores.push(
      await measured(async () => {
        const step = await manager.latestStep();
        await manager.restore(step!, sd);
      }),
    );
  }
  await manager.close();
  sendResult({ restores } satisfies SequenceRun);
} else {
  throw new Error("usage: resume-child.ts save|resume|sequence <root> <tensors> <bytes> …");
}
