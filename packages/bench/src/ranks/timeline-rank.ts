// One rank of the ranks suite's timeline (timeline.ts): loads as rank.ts does, through the
// file:// adapter wrapped to timestamp the metadata read and every data read, and prints
// `TIMELINE {…}`: epoch ms of each event, and the CPU ms its process spent up to some of them.
// usage: timeline-rank.ts <file:// url of the checkpoint> <rows>
import {
  type StateDict,
  type StorageAdapter,
  hostTensor,
  layoutBoxes,
  load,
  openStorage,
  shardedTensor,
} from "@cairn/core";
import { initProcessGroup } from "@cairn/distributed";
import "@cairn/storage-local";

const now = (): number => performance.timeOrigin + performance.now();
const at: Record<string, number> = { processStart: performance.timeOrigin };
const [url, rows] = process.argv.slice(2);
if (!url?.startsWith("file://") || !Number.isSafeInteger(Number(rows)))
  throw new Error("usage: timeline-rank.ts <file:// url> <rows>");
const group = await initProcessGroup({ timeoutMs: 600_000 });
const shape = [Number(rows), 4096];
const state: StateDict = {};
for (let t = 0; t < 4; t++) {
  const shards = layoutBoxes("rows", group.rank, group.worldSize, shape).map((box) => {
    const tensor = hostTensor("float32", box.sizes);
    tensor.data.fill(-1);
    return { offsets: box.offsets, tensor };
  });
  state[`layer${t}`] = shardedTensor("float32", shape, shards);
}
const cut = url.lastIndexOf("/");
const inner = await openStorage(url.slice(0, cut));
const reads: { issued: number; resolved: number }[] = [];
const cpu: Record<string, number> = {};
let cpuStart = process.cpuUsage();
const cpuNow = (): number => {
  const used = process.cpuUsage(cpuStart);
  return (used.user + used.system) / 1000;
};
const timedRead =
  <A extends unknown[], R>(fn: (...args: A) => Promise<R>) =>
  async (...args: A): Promise<R> => {
    const issued = now();
    const result = await fn(...args);
    reads.push({ issued, resolved: now() });
    return result;
  };
const timed: Partial<StorageAdapter> = {
  read: async (...args) => {
    at.metadataReadIssued = now();
    const bytes = await inner.read(...args);
    at.metadataRead = now();
    return bytes;
  },
  openReader: async (path) => {
    if (at.firstFileOpened === undefined) {
      at.firstFileOpened = now();
      cpu.firstFileOpened = cpuNow();
    }
    const reader = await inner.openReader!(path);
    return {
      size: reader.size,
      read: timedRead(reader.read.bind(reader)),
      ...(reader.readScattered ? { readScattered: timedRead(reader.readScattered.bind(reader)) } : {}),
      close: () => reader.close(),
    };
  },
};
const storage = new Proxy(inner, {
  get(target, key) {
    if (key === "read" || key === "openReader") return timed[key];
    const value = Reflect.get(target, key) as unknown;
    return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
  },
});
await group.barrier();
at.barrier = now();
cpuStart = process.cpuUsage();
await load(state, { storage, path: url.slice(cut + 1), processGroup: group });
at.loaded = now();
cpu.loaded = cpuNow();
await group.barrier();
at.secondBarrier = now();
at.firstDataRead = Math.min(...reads.map((r) => r.issued));
at.lastDataRead = Math.max(...reads.map((r) => r.resolved));
process.stdout.write(`TIMELINE ${JSON.stringify({ rank: group.rank, at, cpu, reads: reads.length })}\n`);
await group.close();
