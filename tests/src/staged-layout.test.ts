import {
  type GlobalPlanContext,
  type GlobalSavePlan,
  type HostTensor,
  type Leaf,
  type SavePlan,
  type SavePlanner,
  type WriteItem,
  DefaultSavePlanner,
  StagingPool,
  asyncSave,
  hostTensor,
  load,
} from "@cairn/core";
import { dataFileName } from "@cairn/core/format";
import { pageAlignedSharedBytes } from "@cairn/core/storage";
import { connectTcpProcessGroup, freePort } from "@cairn/distributed";
import { describe, expect, it } from "vitest";
import { openRecording } from "./fixtures/recording-file-storage.js";
import { sampleTensor, tempDir } from "./helpers.js";
import { dataFileWrites, writesSoFar } from "./recorded-writes.js";

/** A planner of its own: each rank writes one file, its items in reverse leaf order; `rankFiles` says so. */
class OneFilePlanner implements SavePlanner {
  readonly #local = new DefaultSavePlanner();

  createLocalPlan(leaves: readonly Leaf[], rank: number): SavePlan {
    return this.#local.createLocalPlan(leaves, rank);
  }

  rankFiles(plan: SavePlan): WriteItem[][] {
    return [[...plan.items].reverse()];
  }

  createGlobalPlan(plans: readonly SavePlan[], context: GlobalPlanContext): GlobalSavePlan {
    return {
      attempt: context.attempt,
      files: plans.map((plan) => [
        { name: dataFileName(plan.rank, 0, context.attempt), items: this.rankFiles(plan)[0]! },
      ]),
      values: plans.flatMap((plan) => plan.values.map((v) => v.entry)),
    };
  }
}

/** The same plans, from a planner that does not say which files a rank writes. */
const silentPlanner = (): SavePlanner => {
  const planner = new OneFilePlanner();
  return {
    createLocalPlan: (leaves, rank) => planner.createLocalPlan(leaves, rank),
    createGlobalPlan: (plans, context) => planner.createGlobalPlan(plans, context),
  };
};

/**
 * Spread over three files by the default planner (41 MB: one file per 16 MiB; largest first onto
 * the emptiest file, then in key order): [a], [b, d] and [c, e, f]. In the third, e's float32 values would start at an odd
 * offset after c's odd length, which no Float32Array can view, so that file is staged leaf by
 * leaf; the other two are staged in their files' layout.
 */
function state(): Record<string, HostTensor | Uint8Array> {
  return {
    a: sampleTensor("float32", [3_145_728], 1),
    b: sampleTensor("int32", [2_400_000], 2),
    c: sampleTensor("uint8", [9_600_001], 3),
    d: sampleTensor("float64", [1_200_000], 4),
    e: sampleTensor("float32", [10], 5),
    f: new Uint8Array(1000).map((_, i) => (i * 7) & 255),
  };
}

/** Loads the checkpoint at `url` and checks every leaf's bytes against what was saved. */
async function expectLoadsBack(url: URL, saved: Record<string, HostTensor | Uint8Array>): Promise<void> {
  const back = (await load(url.href)) as Record<string, HostTensor | Uint8Array>;
  for (const [key, value] of Object.entries(saved)) {
    const want = value instanceof Uint8Array ? value : value.data;
    const got = back[key] instanceof Uint8Array ? (back[key] as Uint8Array) : (back[key] as HostTensor).data;
    expect(
      Buffer.from(got.buffer, got.byteOffset, got.byteLength).equals(
        Buffer.from(want.buffer, want.byteOffset, want.byteLength),
      ),
      key,
    ).toBe(true);
  }
}

/**
 * A pool whose page-aligned buffers start past their memory's byte 0 (as a segment placed on a
 * huge page inside its memory would), each 64 KiB in and the bytes before it filled with 0xee.
 */
class OffsetPool extends StagingPool {
  override async acquire(
    sizes: readonly number[],
    _signal?: AbortSignal,
    pageAligned: readonly boolean[] = [],
  ): Promise<Uint8Array[]> {
    return sizes.map((size, i) => {
      if (pageAligned[i] !== true) return new Uint8Array(new SharedArrayBuffer(size));
      const memory = pageAlignedSharedBytes(size + (64 << 10)).fill(0xee);
      return memory.subarray(64 << 10, (64 << 10) + size);
    });
  }

  override release(): void {}
}

describe("copy staging lays data files out as they are written", () => {
  it.each([
    ["the upload worker", {}],
    ["the calling thread", { uploadWorker: false }],
  ] as const)("writes a segment that starts past its memory's byte 0 from where it starts (%s)", async (_, options) => {
    const url = new URL(`file://${await tempDir()}/ckpt`);
    const before = writesSoFar();
    const saved = state();
    const { done } = await asyncSave(saved, {
      storage: openRecording(url),
      concurrency: 3,
      pool: new OffsetPool(),
      ...options,
    });
    await done;
    await expectLoadsBack(url, saved);
    // Written from the segment where it starts, in place.
    const writes = await dataFileWrites(before, 3);
    const inPlace = writes.filter((w) => w.pageAligned);
    expect(inPlace).toHaveLength(2);
    for (const { parts } of inPlace) expect(parts[0]).toMatchObject({ shared: true, byteOffset: 64 << 10 });
  });

  it.each([
    ["the upload worker", "worker", {}],
    ["the calling thread", "main", { uploadWorker: false }],
  ] as const)(
    "stages each file it can as one page-aligned segment, header first, which %s writes in page-aligned slices",
    async (_, thread, options) => {
      const url = new URL(`file://${await tempDir()}/ckpt`);
      const before = writesSoFar();
      const saved = state();
      const { done } = await asyncSave(saved, { storage: openRecording(url), concurrency: 3, ...options });
      await done;
      const writes = await dataFileWrites(before, 3);
      expect(writes.map((w) => w.thread)).toEqual([thread, thread, thread]);
      // The third file, staged leaf by leaf, goes out from buffers (its 9.6 MB leaf is too large
      // to be packed on the calling thread: packed-save.test.ts covers packing).
      const inPlace = writes.filter((w) => w.pageAligned);
      expect(inPlace).toHaveLength(2);
      for (const { parts } of inPlace) {
        // Slices of one segment, back to back from its start (the header), each from a page boundary.
        let at = 0;
        for (const part of parts) {
          expect(part).toMatchObject({ shared: true, byteOffset: at });
          expect(part.byteOffset % 4096).toBe(0);
          at += part.byteLength;
        }
      }
      if (thread === "worker") {
        // The third file: its header from ordinary memory, then its leaves' own staging buffers.
        const [other] = writes.filter((w) => !w.pageAligned);
        expect(other!.parts[0]).toMatchObject({ shared: false, byteOffset: 0 });
        expect(other!.parts.slice(1).map((p) => p.shared)).toEqual([true, true, true]);
      }

      await expectLoadsBack(url, saved);
    },
  );

  it("stages a custom planner's files as it says it plans them, and writes them from that memory", async () => {
    const url = new URL(`file://${await tempDir()}/ckpt`);
    const before = writesSoFar();
    // 4 MiB and more: the file is not one the calling thread would pack of small tensors by itself.
    const saved = { a: sampleTensor("float32", [1 << 20], 7), b: sampleTensor("int32", [1000], 8) };
    const options = { storage: openRecording(url), uploadWorker: false, planner: new OneFilePlanner() };
    await (
      await asyncSave(saved, options)
    ).done;
    const [write] = await dataFileWrites(before, 1);
    expect(write!.pageAligned).toBe(true);
    let at = 0;
    for (const part of write!.parts) {
      expect(part).toMatchObject({ shared: true, byteOffset: at });
      at += part.byteLength;
    }
    const back = (await load(url.href)) as Record<string, HostTensor>;
    for (const [key, value] of Object.entries(saved))
      expect(Buffer.from(back[key]!.data.buffer).equals(Buffer.from(value.data.buffer)), key).toBe(true);
  });

  it.each([
    ["files are small", { x: hostTensor("float32", [1000], new Float32Array(1000).fill(3)) }, {}],
    [
      "the planner does not say which files a rank writes",
      { x: sampleTensor("float32", [1 << 20], 6), y: sampleTensor("int32", [1000], 9) },
      { planner: silentPlanner() },
    ],
  ])("stages leaf by leaf where %s", async (_, small, options) => {
    const url = new URL(`file://${await tempDir()}/ckpt`);
    const before = writesSoFar();
    await (
      await asyncSave(small, { storage: openRecording(url), uploadWorker: false, ...options })
    ).done;
    const writes = await dataFileWrites(before, 1);
    expect(writes[0]!.pageAligned).toBe(false);
    const back = (await load(url.href)) as Record<string, HostTensor>;
    expect(Buffer.from(back.x!.data.buffer).equals(Buffer.from(small.x.data.buffer))).toBe(true);
  });

  it("with two ranks, writes a file the global plan lays out otherwise as before, and every byte lands where the metadata says", async () => {
    const url = new URL(`file://${await tempDir()}/ckpt`);
    const port = await freePort();
    const groups = await Promise.all(
      [0, 1].map((rank) => connectTcpProcessGroup({ rank, worldSize: 2, host: "127.0.0.1", port, timeoutMs: 10_000 })),
    );
    // Both ranks hold all three (replicated), so each stages its two predicted files [a, c] and [b].
    // The global plan writes each once: a and c on rank 0, which spreads them over two files of
    // one tensor each (not the [a, c] it staged), and b on rank 1, as staged.
    const replicated = (): Record<string, HostTensor> => ({
      a: sampleTensor("float32", [1 << 19], 11),
      b: sampleTensor("float32", [1 << 19], 12),
      c: sampleTensor("int32", [300_000], 13),
    });
    const before = writesSoFar();
    try {
      const handles = await Promise.all(
        groups.map((group) =>
          asyncSave(replicated(), {
            storage: openRecording(url),
            processGroup: group,
            concurrency: 2,
            planner: new DefaultSavePlanner({ minFileBytes: 0 }),
          }),
        ),
      );
      await Promise.all(handles.map((h) => h.done));
    } finally {
      await Promise.all(groups.map((g) => g.close()));
    }
    const writes = await dataFileWrites(before, 3);
    expect(writes.filter((w) => w.pageAligned)).toHaveLength(1);
    const back = (await load(url.href)) as Record<string, HostTensor>;
    for (const [key, value] of Object.entries(replicated()))
      expect(Buffer.from(back[key]!.data.buffer).equals(Buffer.from(value.data.buffer)), key).toBe(true);
  });
});
