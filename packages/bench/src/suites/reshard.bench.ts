// Resharding reads what it needs: a [8192, 4096] float32 tensor saved by 4 ranks (row- and
// column-sharded) and loaded by 3 ranks as rows, columns and blocks. Every byte a load reads is
// counted below the loader by a counting storage adapter, against the bytes the ranks need.
import { join } from "node:path";
import {
  type Layout,
  type ProcessGroup,
  type StorageAdapter,
  type StateDict,
  hostTensor,
  layoutBoxes,
  load,
  save,
  shardedTensor,
} from "@cairn/core";
import { openStorage } from "@cairn/core/storage";
import "@cairn/storage-local";
import { report } from "../report.js";
import { MiB, quick, withTempDir } from "../support.js";

const suite = "reshard";
const SHAPE = quick ? [512, 4096] : [8192, 4096];
const SAVED_BY = 4;
const LOADED_BY = 3;

/** `size` ranks in this process: each collective resolves once every rank has called it. */
function inProcessGroups(size: number): ProcessGroup[] {
  const rounds: { values: unknown[]; arrived: number; done: Promise<unknown[]>; resolve: (v: unknown[]) => void }[] =
    [];
  const calls = new Array<number>(size).fill(0);
  const gather = (rank: number, value: unknown): Promise<unknown[]> => {
    const index = calls[rank]!++;
    let round = rounds[index];
    if (!round) {
      let resolve!: (v: unknown[]) => void;
      const done = new Promise<unknown[]>((r) => (resolve = r));
      round = rounds[index] = { values: new Array(size), arrived: 0, done, resolve };
    }
    round.values[rank] = value;
    if (++round.arrived === size) round.resolve(round.values);
    return round.done;
  };
  return Array.from({ length: size }, (_, rank) => ({
    rank,
    worldSize: size,
    allGather: <T>(value: T) => gather(rank, value) as Promise<T[]>,
    broadcast: async <T>(value: T | undefined, root = 0) => (await gather(rank, value))[root] as T,
    barrier: async () => void (await gather(rank, null)),
  }));
}

/** The rank's shards of the tensor, filled from the global index (so a load can be checked) or zero. */
function rankState(layout: Layout, rank: number, worldSize: number, filled: boolean): StateDict {
  const boxes = layoutBoxes(layout, rank, worldSize, SHAPE);
  const shards = boxes.map((box) => {
    const data = new Float32Array(box.sizes[0]! * box.sizes[1]!);
    if (filled) {
      for (let r = 0; r < box.sizes[0]!; r++) {
        for (let c = 0; c < box.sizes[1]!; c++)
          data[r * box.sizes[1]! + c] = (box.offsets[0]! + r) * SHAPE[1]! + box.offsets[1]! + c;
      }
    }
    return { offsets: box.offsets, tensor: hostTensor("float32", box.sizes, data) };
  });
  return { w: shardedTensor("float32", SHAPE, shards) };
}

/** Every byte read through `inner`, ranged reads and opened readers alike. */
function counting(inner: StorageAdapter): { storage: StorageAdapter; bytes: () => number } {
  let bytes = 0;
  const storage: StorageAdapter = Object.create(inner) as StorageAdapter;
  Object.assign(storage, {
    read: async (...args: Parameters<StorageAdapter["read"]>) => {
      const data = await inner.read(...args);
      bytes += data.byteLength + (args[2]?.head && data.byteLength > 0 ? args[2].head.byteLength : 0);
      return data;
    },
    ...(inner.openReader
      ? {
          openReader: async (path: string) => {
            const reader = await inner.openReader!(path);
            return {
              size: reader.size,
              close: () => reader.close(),
              read: async (...args: Parameters<typeof reader.read>) => {
                const data = await reader.read(...args);
                bytes += data.byteLength + (args[1]?.head && data.byteLength > 0 ? args[1].head.byteLength : 0);
                return data;
              },
            };
          },
        }
      : {}),
  });
  return { storage, bytes: () => bytes };
}

function check(state: StateDict, layout: Layout, rank: number): void {
  const boxes = layoutBoxes(layout, rank, LOADED_BY, SHAPE);
  const { shards } = state.w as unknown as { shards: { tensor: { data: Float32Array } }[] };
  boxes.forEach((box, i) => {
    const data = shards[i]!.tensor.data;
    const last = data.length - 1;
    const row = Math.floor(last / box.sizes[1]!);
    const expected = (box.offsets[0]! + row) * SHAPE[1]! + box.offsets[1]! + (last % box.sizes[1]!);
    if (data[0] !== Math.fround(box.offsets[0]! * SHAPE[1]! + box.offsets[1]!) || data[last] !== Math.fround(expected))
      throw new Error(`rank ${rank} (${layout}) loaded the wrong bytes`);
  });
}

await withTempDir(async (dir) => {
  for (const saved of ["rows", "cols"] as const) {
    const path = join(dir, saved);
    const groups = inProcessGroups(SAVED_BY);
    await Promise.all(
      groups.map((group) =>
        save(rankState(saved, group.rank, SAVED_BY, true), { checkpointId: path, processGroup: group }),
      ),
    );
    const base = await openStorage(`file://${path}`);
    const metadataBytes = (await base.stat("metadata.json"))!.size;
    for (const layout of ["rows", "cols", "blocks"] as const) {
      let read = 0;
      let needed = 0;
      for (let rank = 0; rank < LOADED_BY; rank++) {
        const { storage, bytes } = counting(base);
        const target = rankState(layout, rank, LOADED_BY, false);
        await load(target, { storage, path: "" });
        check(target, layout, rank);
        read += bytes();
        needed += layoutBoxes(layout, rank, LOADED_BY, SHAPE).reduce(
          (n, box) => n + box.sizes[0]! * box.sizes[1]! * 4,
          0,
        );
      }
      report({
        suite,
        name: `load ${SAVED_BY} → ${LOADED_BY} ranks, [${SHAPE.join(", ")}] float32 saved as ${saved}, loaded as ${layout}: bytes read`,
        value: read / MiB,
        unit: "MiB",
        baseline: { name: "bytes the ranks need", value: needed / MiB },
        ratio: read / needed,
        better: "lower",
        target: 1.25,
        extra: { bytesRead: read, bytesNeeded: needed, metadataBytes, ranks: LOADED_BY },
      });
    }
    await base.close();
  }
});
