// What replication costs the training thread: core's copyCheckpoint of a 256 MiB step (32 MiB
// quick) from one file:// tier to another, every byte checked against its CRC32Cs, with the CRCs
// on checksum workers (`offThread`, as a tiered manager copies) and on the calling thread, against
// the same data files copied unchecked (the same 8 MiB ranged reads and streamed writes, two files
// at once). Figures: the main thread's busy time during the copy (event-loop utilisation's active
// time), and the longest event-loop delay seen meanwhile.
import { monitorEventLoopDelay, performance } from "node:perf_hooks";
import { type CheckpointMetadata, type StorageAdapter, openStorage, readMetadata, save } from "@cairn/core";
import { copyCheckpoint } from "@cairn/core/ops";
import "@cairn/storage-local";
import { TENSORS, TOTAL, tensors } from "../remote-support.js";
import { report } from "../report.js";
import { MiB, median, range, rounds, withTempDir } from "../support.js";

const SUITE = "replication";
const size = `${TOTAL / MiB} MiB`;
const READ_BYTES = 8 * MiB;

interface Cost {
  /** Main-thread busy time, ms. */
  readonly busy: number;
  /** Longest event-loop delay, ms. */
  readonly maxDelay: number;
  readonly seconds: number;
}

/** Runs `work`, measuring the main thread's busy time and its longest event-loop delay meanwhile. */
async function cost(work: () => Promise<unknown>): Promise<Cost> {
  const delay = monitorEventLoopDelay({ resolution: 5 });
  delay.enable();
  const elu = performance.eventLoopUtilization();
  const started = performance.now();
  await work();
  const used = performance.eventLoopUtilization(elu);
  delay.disable();
  return { busy: used.active, maxDelay: delay.max / 1e6, seconds: (performance.now() - started) / 1000 };
}

/** The data files copied byte for byte, two at a time, in 8 MiB ranged reads streamed into each write: no checks. */
async function uncheckedCopy(
  from: StorageAdapter,
  to: StorageAdapter,
  dir: string,
  metadata: CheckpointMetadata,
): Promise<void> {
  const files = Object.entries(metadata.files);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < files.length) {
      const [file, info] = files[next++]!;
      const body = async function* (): AsyncGenerator<Uint8Array> {
        for (let at = 0; at < info.size; at += READ_BYTES)
          yield await from.read(file, { offset: at, length: Math.min(READ_BYTES, info.size - at) });
      };
      await to.write(`${dir}/${file}`, body(), { size: info.size });
    }
  };
  await Promise.all([worker(), worker()]);
}

function reportCost(
  name: string,
  baseline: string,
  unit: string,
  cairn: number[],
  base: number[],
  extra: Record<string, number | string | readonly number[]>,
): void {
  const value = median(cairn);
  const baseValue = median(base);
  report({
    suite: SUITE,
    name,
    value,
    unit,
    baseline: { name: baseline, value: baseValue },
    ratio: value / baseValue,
    better: "lower",
    extra: {
      rounds: cairn.length,
      cairn: range(cairn).map((x) => Number(x.toFixed(1))),
      baseline: range(base).map((x) => Number(x.toFixed(1))),
      ...extra,
    },
  });
}

await withTempDir(async (dir) => {
  const state = Object.fromEntries(tensors(true).map((t, i) => [`t${i}`, t]));
  await save(state, `file://${dir}/src`);
  const metadata = await readMetadata(`file://${dir}/src`);
  const from = await openStorage(`file://${dir}/src`);
  const to = await openStorage(`file://${dir}/dst`);
  const sides = ["unchecked", "workers", "calling"] as const;
  const costs: Record<(typeof sides)[number], Cost[]> = { unchecked: [], workers: [], calling: [] };
  try {
    const n = rounds(5);
    for (let r = 0; r < n; r++) {
      // Rotate which goes first, so a warm page cache favours none.
      for (const who of [...sides.slice(r % 3), ...sides.slice(0, r % 3)]) {
        const where = `${who}-${r}`;
        const copy = (offThread: boolean) => () =>
          copyCheckpoint(
            { storage: from, dir: "", metadata, where: from.root },
            { storage: to, dir: where, where: `${to.root}/${where}` },
            { readBack: false, offThread },
          );
        costs[who].push(
          await cost(who === "unchecked" ? () => uncheckedCopy(from, to, where, metadata) : copy(who === "workers")),
        );
        for await (const o of to.list(`${where}/`)) await to.delete(o.path);
      }
    }
  } finally {
    await from.close();
    await to.close();
  }
  const secondsOf = (cs: Cost[]): number => Number(median(cs.map((c) => c.seconds)).toFixed(3));
  const extra = {
    workersS: secondsOf(costs.workers),
    callingS: secondsOf(costs.calling),
    uncheckedS: secondsOf(costs.unchecked),
    files: TENSORS,
  };
  const copy = `copyCheckpoint ${size} file:// to file://, every byte CRC-checked`;
  const busy = (who: "workers" | "calling"): void =>
    reportCost(
      `main-thread busy time, ${copy} on ${who === "workers" ? "checksum workers (offThread)" : "the calling thread"}`,
      "the same files copied unchecked",
      "ms",
      costs[who].map((c) => c.busy),
      costs.unchecked.map((c) => c.busy),
      extra,
    );
  busy("workers");
  busy("calling");
  reportCost(
    `longest event-loop delay, ${copy} on checksum workers (offThread)`,
    "the same files copied unchecked",
    "ms",
    costs.workers.map((c) => c.maxDelay),
    costs.unchecked.map((c) => c.maxDelay),
    extra,
  );
  reportCost(
    `longest event-loop delay, ${copy} on the calling thread`,
    "the same files copied unchecked",
    "ms",
    costs.calling.map((c) => c.maxDelay),
    costs.unchecked.map((c) => c.maxDelay),
    extra,
  );
}, "cairn-bench-replication-");
