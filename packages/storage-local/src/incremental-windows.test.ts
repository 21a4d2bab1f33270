import { promises as nodeFs } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  type HostTensor,
  StagingPool,
  type StateDict,
  asyncSave,
  hostTensor,
  load,
  readMetadata,
  save,
} from "@cairn/core";
import { blockChecksums, loadXxh128 } from "@cairn/core/format";
import { seededRandom } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";
import type { WriteBody, WriteOptions } from "@cairn/core/storage";
import { FsStorageAdapter } from "./fs-storage-adapter.js";
import type { FsPromisesLike } from "./fs-like.js";

// Incremental saves decide "unchanged" by each chunk's XXH3-128, hashed in the checksum workers
// from pooled windows (small chunks through hash-wasm's exports, big ones in pieces over several
// windows). A digest of stale window bytes, of a previous chunk's state or of another chain's
// chunk would keep a changed tensor as the base's: each step must load bit-exact.

const roots: string[] = [];
afterAll(async () => {
  await Promise.all(roots.map((d) => rm(d, { recursive: true, force: true })));
});

/** Byte lengths at every XXH3 length class and the workers' 2 KiB / 4 KiB paths, each twice (so equal sizes can swap). */
const EDGES = [0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097];

const bytesOf = (t: HostTensor): Uint8Array => new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);

function tensorOf(bytes: Uint8Array, rows = 1): HostTensor {
  const t = hostTensor("uint8", rows === 1 ? [bytes.byteLength] : [rows, bytes.byteLength / rows]);
  bytesOf(t).set(bytes);
  return t;
}

/** A fresh tensor of `t`'s shape holding `bytes` (its own by default). */
const copyOf = (t: HostTensor, bytes = bytesOf(t)): HostTensor =>
  tensorOf(bytes, t.shape.length === 2 ? t.shape[0] : 1);

/** Small tensors at the edges (twice) and at random sizes, and one of 9 MiB (more than a window: hashed in pieces). */
function firstState(random: () => number): Record<string, HostTensor> {
  const fill = (n: number): Uint8Array => Uint8Array.from({ length: n }, () => (random() * 256) | 0);
  const sd: Record<string, HostTensor> = {};
  [...EDGES, ...EDGES].forEach((n, i) => (sd[`edge.${i}`] = tensorOf(fill(n))));
  for (let i = 0; i < 30; i++) sd[`small.${i}`] = tensorOf(fill(Math.floor(random() * 6000)));
  const big = new Uint8Array(9 << 20);
  for (let i = 0; i < big.length; i += 4096) big.set(fill(64), i);
  sd.big = tensorOf(big, 3);
  return sd;
}

/**
 * The next step's state: most tensors kept, others with one byte flipped (often the first or
 * last), swapped with another of the same size, or put back to what they held two steps before.
 */
function nextState(
  random: () => number,
  now: Record<string, HostTensor>,
  before: Record<string, HostTensor>,
): Record<string, HostTensor> {
  const next: Record<string, HostTensor> = { ...now };
  const keys = Object.keys(now);
  for (const key of keys) {
    const bytes = bytesOf(now[key]!);
    const roll = random();
    if (roll < 0.55 || bytes.byteLength === 0) continue;
    if (roll < 0.8) {
      const copy = bytes.slice();
      const at = [0, copy.length - 1, Math.floor(random() * copy.length)][Math.floor(random() * 3)]!;
      copy[at]! ^= 1 << Math.floor(random() * 8);
      next[key] = copyOf(now[key]!, copy);
    } else if (roll < 0.9) {
      const other = keys.find((k) => k !== key && now[k]!.data.byteLength === bytes.byteLength);
      if (other) [next[key], next[other]] = [now[other]!, now[key]!];
    } else if (before[key]) next[key] = before[key];
  }
  return next;
}

async function expectStep(storage: FsStorageAdapter, path: string, sd: Record<string, HostTensor>): Promise<void> {
  const xxh = await loadXxh128();
  for (const entry of (await readMetadata({ storage, path })).entries) {
    if (entry.kind !== "tensor") continue;
    const bytes = bytesOf(sd[entry.key.join(".")]!);
    const [chunk] = entry.chunks;
    expect(chunk!.hash, `${path} ${entry.key.join(".")}`).toBe(xxh.hash(bytes));
    expect(chunk!.crc32c, `${path} ${entry.key.join(".")}`).toEqual(blockChecksums(bytes, chunk!.blockSize));
  }
  const target: StateDict = {};
  for (const [key, t] of Object.entries(sd)) target[key] = hostTensor(t.dtype, t.shape);
  await load(target, { storage, path });
  for (const [key, t] of Object.entries(sd))
    expect(Buffer.compare(bytesOf(target[key] as HostTensor), bytesOf(t)), `${path} ${key}`).toBe(0);
}

/** file:// that aborts a save after its `after`-th write or progress mark (a seeded moment inside its I/O). */
class AbortingAdapter extends FsStorageAdapter {
  readonly plans = new Map<string, { after: number; abort: () => void }>();
  #tick(path: string): void {
    for (const [prefix, plan] of this.plans) if (path.startsWith(prefix) && plan.after-- === 0) plan.abort();
  }
  override write(path: string, body: WriteBody, options: WriteOptions = {}): Promise<void> {
    this.#tick(path);
    const told = options.onWritten;
    return super.write(path, body, {
      ...options,
      ...(told ? { onWritten: (bytes: number) => (this.#tick(path), told(bytes)) } : {}),
    });
  }
}

/** A file:// adapter of class `Adapter` on a fresh directory, removed after the tests. */
async function temporary<T extends FsStorageAdapter>(
  Adapter: new (...args: ConstructorParameters<typeof FsStorageAdapter>) => T,
): Promise<T> {
  const root = await mkdtemp(join(tmpdir(), "cairn-incremental-windows-"));
  roots.push(root);
  return new Adapter("file", root, nodeFs as unknown as FsPromisesLike, root, {
    syncDirectories: false,
    directIo: false,
  });
}

describe("incremental file:// saves through pooled windows", () => {
  it("keep no changed tensor as unchanged over seeded chains of small edits, three chains at once", async () => {
    const storage = await temporary(FsStorageAdapter);
    /**
     * Five steps of one seed's edits. `background`: asyncSave from one staging pool (its buffers
     * reused step after step), the tensors given to it scribbled over as soon as it staged them.
     */
    const chain = async (seed: number, blockSize: number | undefined, background: boolean): Promise<void> => {
      const random = seededRandom(seed);
      const pool = new StagingPool();
      const steps = [firstState(random)];
      for (let step = 0; step < 5; step++) {
        if (step > 0) steps.push(nextState(random, steps[step - 1]!, steps[step - 2] ?? {}));
        const path = `c${seed}/${step}`;
        const options = {
          storage,
          path,
          ...(blockSize ? { blockSize } : {}),
          ...(step > 0 ? { incremental: { base: String(step - 1) } } : {}),
        };
        if (background) {
          const live: Record<string, HostTensor> = {};
          for (const [key, t] of Object.entries(steps[step]!)) live[key] = copyOf(t);
          const handle = await asyncSave(live, { ...options, pool, uploadWorker: false });
          await handle.staged;
          for (const t of Object.values(live)) bytesOf(t).fill(step + 1);
          await handle.done;
        } else await save(steps[step]!, options);
        await expectStep(storage, path, steps[step]!);
        // Unchanged tensors were taken from the base (the decision under test was made).
        if (step > 0) {
          const files = Object.values((await readMetadata({ storage, path })).files);
          expect(
            files.some((f) => f.dir !== undefined),
            path,
          ).toBe(true);
        }
      }
      // The bases are untouched by what referenced them.
      for (const [step, sd] of steps.entries()) await expectStep(storage, `c${seed}/${step}`, sd);
    };
    // Default blocks (one digest per small chunk), 1 KiB blocks (small chunks hashed block by
    // block) and background saves (staged bytes hashed by the workers) at once.
    await Promise.all([chain(341, undefined, false), chain(342, 1024, false), chain(343, undefined, true)]);
  }, 120_000);

  it("commit a step whole or not at all when saves beside it are aborted at seeded moments", async () => {
    const storage = await temporary(AbortingAdapter);
    const random = seededRandom(344);
    const base = firstState(random);
    await save(base, { storage, path: "a/base" });
    let committedAborts = 0;
    let refused = 0;
    for (let round = 0; round < 6; round++) {
      const states = [0, 1, 2].map(() => nextState(random, base, {}));
      const controllers = states.map(() => new AbortController());
      // Saves 0 and 2 are aborted at a seeded write or progress mark of theirs (maybe after they committed); save 1 is not.
      for (const i of [0, 2]) {
        const abort = () => controllers[i]!.abort(new Error("aborted by the test"));
        storage.plans.set(`a/${round}.${i}/`, { after: Math.floor(random() * 10), abort });
      }
      const saves = states.map((sd, i) =>
        save(sd, {
          storage,
          path: `a/${round}.${i}`,
          signal: controllers[i]!.signal,
          ...(i === 2 ? { incremental: { base: "base" } } : {}),
        }),
      );
      const outcomes = await Promise.allSettled(saves);
      for (const [i, outcome] of outcomes.entries()) {
        const path = `a/${round}.${i}`;
        if (outcome.status === "fulfilled") {
          if (i !== 1) committedAborts++;
          await expectStep(storage, path, states[i]!);
        } else {
          expect(i, `${path}: ${String(outcome.reason)}`).not.toBe(1);
          await expect(readMetadata({ storage, path }), path).rejects.toMatchObject({ code: "not_found" });
          refused++;
        }
      }
    }
    // Some saves were aborted part way, and the base is intact.
    expect(refused).toBeGreaterThan(0);
    expect(committedAborts + refused).toBe(12);
    await expectStep(storage, "a/base", base);
  }, 120_000);
});
