import { type DType, type HostTensor, type StateDict, DefaultSavePlanner, asyncSave, load, save } from "@cairn/core";
import { seededRandom } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { locations } from "./helpers.js";
import { bits, copied, filesOf, filled } from "./plan-cache-helpers.js";

/**
 * The plan cache (core/src/plan/save-plan-cache.ts) is shared by every save of the process. Saves
 * in flight at once, of states that differ only in what a stale entry would get wrong (a shape of
 * the same byte count, a dtype of the same size, a renamed key, an array where an object with the
 * key "0" was), background saves whose state changes shape in place once staged, and aborted ones,
 * each write exactly what a save planned without the cache writes, and load bit-exact.
 */

type Random = () => number;
const pick = <T>(random: Random, list: readonly T[]): T => list[Math.floor(random() * list.length)]!;

/** One of a family of states with one structure, or one that differs from it where a stale entry would not notice. */
function variant(random: Random, kind: number): StateDict {
  const shape = kind === 1 ? [4, 6] : kind === 2 ? [24] : [6, 4];
  const dtype: DType = kind === 3 ? "int32" : "float32";
  const w = filled(dtype, shape, random);
  const b = filled("float32", [6], random);
  const layers = kind === 4 ? { 0: { w }, 1: { w: b } } : [{ w }, { w: b }];
  const key = kind === 5 ? "bias2" : "bias";
  return { layers, [key]: filled("int16", [3, 5], random), step: kind, blob: new Uint8Array(kind === 6 ? 9 : 10) };
}

function hostTensors(value: unknown, found: HostTensor[] = []): HostTensor[] {
  if (typeof value !== "object" || value === null || ArrayBuffer.isView(value)) return found;
  if ("dtype" in value && "data" in value) found.push(value as HostTensor);
  else for (const child of Object.values(value)) hostTensors(child, found);
  return found;
}

/** Changes a staged state's structure and bytes in place, as training may once `staged` resolved. */
function scramble(state: StateDict, random: Random): void {
  for (const t of hostTensors(state)) {
    new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength).fill(Math.floor(random() * 256));
    const shape = t.shape as number[];
    const n = shape.reduce((a, x) => a * x, 1);
    shape.length = 0;
    shape.push(n);
  }
  (state as Record<string, unknown>).renamed = (state as Record<string, unknown>).bias;
  delete (state as Record<string, unknown>).bias;
}

/** What the seeds made happen, so a change that makes them test nothing fails. */
const seen = new Set<string>();

describe("the plan cache under concurrent, background and aborted saves (property)", () => {
  for (let seed = 1; seed <= 6; seed++) {
    it(`seed ${seed}: every committed save writes what an uncached save writes and loads bit-exact`, async () => {
      const random = seededRandom(seed * 31337);
      for (let round = 0; round < 6; round++) {
        const launched = Array.from({ length: 2 + Math.floor(random() * 3) }, () => {
          const kind = Math.floor(random() * 7);
          const state = variant(random, kind);
          return {
            kind,
            state,
            snapshot: copied(state) as StateDict,
            where: pick(random, ["file", "memory"] as const),
            background: random() < 0.5,
            abort: random() < 0.2 ? Math.floor(random() * 4) : undefined,
            concurrency: pick(random, [1, 2, 3]),
            minFileBytes: pick(random, [0, undefined]),
          };
        });
        const saves = await Promise.all(
          launched.map(async (s) => {
            const url = await locations[s.where]();
            const controller = new AbortController();
            const options = {
              checkpointId: url,
              concurrency: s.concurrency,
              planner: new DefaultSavePlanner({ minFileBytes: s.minFileBytes }),
              signal: controller.signal,
            };
            if (s.abort !== undefined) {
              let turns = s.abort;
              const tick = (): void => (turns-- > 0 ? void queueMicrotask(tick) : controller.abort());
              tick();
            }
            if (!s.background) {
              const done = save(s.state, options);
              // Settled below, once every save was launched; an early rejection is no unhandled one.
              done.catch(() => undefined);
              return { ...s, url, done };
            }
            const handle = await asyncSave(s.state, options);
            const done = handle.staged.then(() => {
              scramble(s.state, random);
              return handle.done;
            });
            done.catch(() => undefined);
            return { ...s, url, done };
          }),
        );
        const results = await Promise.allSettled(saves.map((s) => s.done));
        for (const [i, s] of saves.entries()) {
          const result = results[i]!;
          const what = `seed ${seed} round ${round} save ${i} (variant ${s.kind}, ${s.background ? "async" : "sync"}, ${s.where})`;
          if (result.status === "rejected") {
            expect(result.reason, what).toMatchObject({ code: "cancelled" });
            seen.add("aborted");
            continue;
          }
          seen.add(s.background ? "async" : "sync");
          const oracle = await locations[s.where]();
          await save(s.snapshot, {
            checkpointId: oracle,
            concurrency: s.concurrency,
            planner: new DefaultSavePlanner({ minFileBytes: s.minFileBytes, cachePlans: false }),
          });
          expect(bits(await load(s.url)), `${what}: loaded`).toEqual(bits(await load(oracle)));
          const [a, b] = [await filesOf(s.url), await filesOf(oracle)];
          expect([...a.keys()].sort(), what).toEqual([...b.keys()].sort());
          for (const [name, bytes] of a) expect(bytes.equals(b.get(name)!), `${what}: ${name}`).toBe(true);
        }
      }
    }, 120_000);
  }

  it("made saves commit in the background and at once, and aborted some", () => {
    expect([...seen].sort()).toEqual(["aborted", "async", "sync"]);
  });
});
