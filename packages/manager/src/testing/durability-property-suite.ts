import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { type StorageAdapter, hostTensor, isCheckpointError, openStorage } from "@cairn/core";
import { TEMP_OBJECT_PREFIX } from "@cairn/core/storage";
import { describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import { committedStepsUnder } from "../steps/step-listing.js";
import { type DurabilitySuiteOptions, truncateDataFile } from "./durability-suite.js";
import { random } from "./seeded-random.js";

export interface DurabilityPropertyOptions extends DurabilitySuiteOptions {
  /** One random sequence per seed (fixed, so a failure replays). */
  readonly seeds?: readonly number[];
  readonly operations?: number;
}

function state(step: number): { w: ReturnType<typeof hostTensor>; step: number } {
  return { w: hostTensor("float32", [1024], new Float32Array(1024).fill(step)), step };
}

async function dataFiles(storage: StorageAdapter, step: number): Promise<string[]> {
  const out: string[] = [];
  for await (const o of storage.list(`${step}/`)) {
    const name = o.path.slice(o.path.lastIndexOf("/") + 1);
    if (name !== "metadata.json" && !name.startsWith(TEMP_OBJECT_PREFIX)) out.push(o.path);
  }
  return out.sort();
}

async function replace(storage: StorageAdapter, path: string, body: Uint8Array): Promise<void> {
  await storage.delete(path);
  await storage.write(path, body);
}

/** The ways a step's copy is damaged: each leaves its metadata.json in place, so the step is still listed. */
const DAMAGE: Record<string, (storage: StorageAdapter, step: number, pick: (n: number) => number) => Promise<void>> = {
  truncate: async (storage, step) => void (await truncateDataFile(storage, step)),
  flip: async (storage, step, pick) => {
    const files = await dataFiles(storage, step);
    const path = files[pick(files.length)]!;
    const bytes = new Uint8Array(await storage.read(path));
    bytes[bytes.byteLength - 1 - pick(64)]! ^= 0x5a;
    await replace(storage, path, bytes);
  },
  delete: async (storage, step, pick) => {
    const files = await dataFiles(storage, step);
    await storage.delete(files[pick(files.length)]!);
  },
  garble: async (storage, step, pick) => {
    const path = `${step}/metadata.json`;
    const bytes = await storage.read(path);
    await replace(storage, path, pick(2) === 0 ? bytes.subarray(0, bytes.byteLength >> 1) : Uint8Array.of(123, 0, 7));
  },
};

/** What the loss budget should say, replayed from what the loop did and what the manager reported. */
class BudgetModel {
  readonly #atRisk = new Set<number>();
  readonly #durable = new Set<number>();
  newestSaved: number | undefined;
  newestDurable: number | undefined;

  saved(step: number): void {
    this.#atRisk.add(step);
    this.newestSaved = step;
  }
  replicated(step: number): void {
    this.#durable.add(step);
    this.newestDurable = Math.max(this.newestDurable ?? step, step);
    for (const s of this.#atRisk) if (s <= step) this.#atRisk.delete(s);
  }
  /** A step the manager found damaged everywhere: if it was the newest durable one, the one before it is. */
  damaged(step: number): void {
    if (!this.#durable.delete(step) || step !== this.newestDurable) return;
    this.newestDurable = newestOf(this.#durable);
    this.#atRisk.add(step);
  }
  get stepsAtRisk(): number {
    if (this.#atRisk.size === 0) return 0;
    const newest = newestOf(this.#atRisk)!;
    return newest - (this.newestDurable ?? oldestOf(this.#atRisk)! - 1);
  }
}

/**
 * A seeded property test of the durability contract over random sequences of saves, saveAsyncs,
 * restores, damage to a random file of a random step on either tier (truncated, a byte flipped,
 * deleted, metadata.json garbled), outages of the durable tier, reopened managers and retention,
 * on a real file:// tier 0 and the durable tier under test. After every operation: restore("latest")
 * is exactly the newest step with an intact copy (or `corrupt` listing each committed step, or
 * not_found only before any commit); latestStep({ verified: true }) never names a step the manager
 * found damaged; retention never loses the newest intact step; health() is what a model of the
 * loop's saves and the manager's reports says.
 */
export function durabilityPropertySuite(name: string, options: DurabilityPropertyOptions): void {
  // Seeds whose sequences caught a defect (a bucket outage made restore("latest") pass over good steps).
  const seeds = options.seeds ?? [8, 12, 103];
  const operations = options.operations ?? 40;
  describe(`durability property: file:// then ${name}`, () => {
    for (const seed of seeds)
      it(
        `seed ${seed}: ${operations} random operations keep the contract`,
        { timeout: options.timeoutMs ?? 120_000 },
        async () => {
          const next = random(seed);
          const pick = (n: number): number => Math.floor(next() * n);
          const dir = await mkdtemp(join(tmpdir(), "cairn-durability-property-"));
          const local = pathToFileURL(join(dir, "local")).href;
          const localStorage = await openStorage(local);
          const durable = await options.durable();
          const tiers: readonly StorageAdapter[] = [localStorage, durable.storage];
          const damaged = [new Set<number>(), new Set<number>()];
          const log: string[] = [];
          const where = (): string => `seed ${seed}: ${log.join("; ")}`;
          let down = false;
          let last = 0;
          let newestIntact: number | undefined;
          let budget = new BudgetModel();
          let found = new Set<number>();
          const open = (): CheckpointManager => {
            const mgr = new CheckpointManager([local, durable.location], 1, {
              tiers: [{ maxToKeep: 1 + pick(3) }, { maxToKeep: 2 + pick(3) }],
              replication: { retry: { baseDelayMs: 10, maxDelayMs: 100 } },
              storageOptions: options.storageOptions?.() ?? {},
              checkpointOnPreemption: false,
            });
            budget = new BudgetModel();
            found = new Set();
            mgr.on("error", () => undefined);
            mgr.on("replicated", ({ step, tier }) => tier === 1 && budget.replicated(step));
            mgr.on("skipped", ({ step }) => {
              found.add(step);
              budget.damaged(step);
            });
            return mgr;
          };
          let mgr = open();
          try {
            for (let op = 0; op < operations; op++) {
              const roll = next();
              let damaging = false;
              if (roll < 0.35) {
                const step = ++last;
                budget.saved(step);
                await (next() < 0.5 ? mgr.save(step, state(step)) : mgr.saveAsync(step, state(step)));
                log.push(`save ${step}`);
              } else if (roll < 0.45 && !down) {
                const listed = await committedStepsUnder(localStorage, "");
                const step = listed[pick(listed.length)];
                if (step === undefined) continue;
                const error = await mgr.restore(step, state(-1)).then(
                  () => undefined,
                  (e: unknown) => e,
                );
                if (isCheckpointError(error, "corrupt") || isCheckpointError(error, "not_found")) {
                  found.add(step);
                  budget.damaged(step);
                } else if (error !== undefined) throw error;
                log.push(`restore ${step}${error === undefined ? "" : " (damaged)"}`);
              } else if (roll < 0.7) {
                await mgr.join().catch(() => undefined);
                const tier = pick(2);
                const listed = await committedStepsUnder(tiers[tier]!, "");
                const step = listed[pick(listed.length)];
                if (step === undefined) continue;
                // A step whose data files were all deleted can still have its metadata garbled.
                const kinds = (await dataFiles(tiers[tier]!, step)).length > 0 ? Object.keys(DAMAGE) : ["garble"];
                const how = kinds[pick(kinds.length)]!;
                await DAMAGE[how]!(tiers[tier]!, step, pick);
                damaged[tier]!.add(step);
                damaging = true;
                log.push(`${how} ${step} on tier ${tier}`);
              } else if (roll < 0.82) {
                down = !down;
                (down ? durable.outage.start : durable.outage.end)();
                log.push(down ? "bucket down" : "bucket up");
              } else if (roll < 0.92) {
                await mgr.close({ timeoutMs: 300 }).catch(() => undefined);
                mgr = open();
                log.push("reopen");
              } else {
                await mgr.reload().catch(() => undefined);
                log.push("reload");
              }
              await mgr.join().catch(() => undefined);

              // What exists, from the storage itself: a copy is intact unless this test damaged it.
              const present = await Promise.all(tiers.map((t) => committedStepsUnder(t, "")));
              const intact = (t: number, s: number): boolean => present[t]!.includes(s) && !damaged[t]!.has(s);
              const newest = [...new Set(present.flat())]
                .filter((s) => intact(0, s) || intact(1, s))
                .reduce<number | undefined>((a, s) => Math.max(a ?? s, s), undefined);
              // Retention never deletes the newest intact step: only damage makes it older.
              if (!damaging && newestIntact !== undefined)
                expect(newest, `the newest intact step went back (${where()})`).toBeGreaterThanOrEqual(newestIntact);
              newestIntact = newest;

              // With the bucket down, what it holds is unknown: an answer, or \`storage\`.
              const verified = await mgr.latestStep({ verified: true }).catch((error: unknown) => {
                if (down && isCheckpointError(error, "storage")) return undefined;
                throw error;
              });
              if (verified !== undefined) expect(found.has(verified), where()).toBe(false);
              const target = state(-1);
              const restored = await mgr.restore("latest", target).then(
                (r) => r.step,
                (e: unknown) => e,
              );
              if (down) {
                // Only tier 0 answers: its newest intact step, or `storage` (the bucket may hold a good
                // copy of what is damaged here); `corrupt` only when tier 0 holds nothing intact.
                const local = present[0]!.filter((s) => intact(0, s));
                if (typeof restored === "number") {
                  expect(intact(0, restored) || intact(1, restored), where()).toBe(true);
                  expect(target.w.data[0], where()).toBe(restored);
                  expect(
                    local.filter((s) => s > restored),
                    where(),
                  ).toEqual([]);
                } else if (isCheckpointError(restored, "not_found")) {
                  expect(last, `not_found after a commit (${where()})`).toBe(0);
                } else if (!isCheckpointError(restored, "storage")) {
                  expect(isCheckpointError(restored, "corrupt"), `${String(restored)} (${where()})`).toBe(true);
                  expect(local, where()).toEqual([]);
                }
              } else {
                const expected = newest ?? (present.flat().length > 0 ? "corrupt" : "not_found");
                if (typeof expected === "number") {
                  expect(restored, where()).toBe(expected);
                  expect(target.w.data[0], where()).toBe(expected);
                  expect(await mgr.latestStep({ verified: true }), where()).toBe(expected);
                } else {
                  expect(
                    isCheckpointError(restored, expected),
                    `${expected}, not ${String(restored)} (${where()})`,
                  ).toBe(true);
                  if (expected === "corrupt")
                    for (const s of new Set(present.flat()))
                      expect((restored as Error).message).toContain(`step ${s} (`);
                  else expect(last, `not_found after a commit (${where()})`).toBe(0);
                }
              }
              const health = mgr.health();
              expect(
                {
                  newestSaved: health.newestSaved,
                  newestDurable: health.newestDurable,
                  stepsAtRisk: health.stepsAtRisk,
                },
                where(),
              ).toEqual({
                newestSaved: budget.newestSaved,
                newestDurable: budget.newestDurable,
                stepsAtRisk: budget.stepsAtRisk,
              });
            }
          } finally {
            durable.outage.end();
            await mgr.close({ timeoutMs: 300 }).catch(() => undefined);
            await localStorage.close();
            await rm(dir, { recursive: true, force: true });
          }
        },
      );
  });
}

function newestOf(steps: ReadonlySet<number>): number | undefined {
  let newest: number | undefined;
  for (const step of steps) if (newest === undefined || step > newest) newest = step;
  return newest;
}

function oldestOf(steps: ReadonlySet<number>): number | undefined {
  let oldest: number | undefined;
  for (const step of steps) if (oldest === undefined || step < oldest) oldest = step;
  return oldest;
}
