// Issue 30's acceptance: the tiered property test over two ranks. Random sessions of a two-rank
// job (tier 0 shared, or one per rank; tier 1 a shared bucket): saves and saveAsyncs, some
// incremental, rollbacks with and without overwrite, tier 1 going down mid-session, both ranks
// SIGKILLed at a random moment, and other runs' or damaged copies planted on tier 1 between
// sessions. Each session's ranks first restore every step allSteps() lists; after every operation
// every listed step restores on both ranks with bytes saved for that step, each step's latest
// save restores as itself (no tier deleted its last good copy), and every step tier 1 lists loads
// with bytes saved for it.
import { type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { type StorageAdapter, load, openStorage, save } from "@cairn/core";
import { rankResults, spawnTypeScript } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";
import { StepStore } from "../src/steps/step-store.js";
import type { RankCheck, RankPlan, RankReport } from "./fixtures/tiered-ranks-property-rank.js";
import { rowShardedState } from "./fixtures/row-sharded-state.js";
import { random } from "../src/testing/seeded-random.js";

const RANK = fileURLToPath(new URL("./fixtures/tiered-ranks-property-rank.ts", import.meta.url));
/** Seed → tier 0 layout: one shared directory, or one per rank (each rank's disk). */
const SEEDS = (process.env.CAIRN_TIERED_RANKS_SEEDS ?? "41,42").split(",").map(Number);
const OPERATIONS = 6;
const dirs: string[] = [];
afterAll(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * Runs both ranks of one session. With `killAfterMs`, SIGKILLs both that long after both printed
 * "ready" (a lost job) and returns their checks only; otherwise waits for both to exit cleanly.
 */
async function session(
  dir: string,
  layout: string,
  plan: RankPlan,
  killAfterMs?: number,
): Promise<{ checks: RankCheck[]; reports: RankReport[] }> {
  const port = await freePort();
  const ranks = [0, 1].map((rank) => {
    const child: ChildProcess = spawnTypeScript(RANK, [dir, layout, JSON.stringify(plan)], {
      env: { RANK: String(rank), WORLD_SIZE: "2", MASTER_ADDR: "127.0.0.1", MASTER_PORT: String(port) },
    });
    const r = { child, out: "", code: new Promise<number | null>((resolve) => child.once("exit", resolve)) };
    child.stdout!.on("data", (d: Buffer) => (r.out += d.toString()));
    child.stderr!.on("data", (d: Buffer) => (r.out += d.toString()));
    return r;
  });
  const output = (): string => ranks.map((r, i) => `rank ${i}:\n${r.out}`).join("\n");
  if (killAfterMs !== undefined) {
    const ready = ranks.map(
      (r) =>
        new Promise<void>((resolve, reject) => {
          const poll = setInterval(() => {
            if (r.out.includes("ready\n")) resolve();
            else if (r.child.exitCode !== null) reject(new Error(`a rank exited before ready:\n${output()}`));
            else return;
            clearInterval(poll);
          }, 20);
        }),
    );
    try {
      await Promise.all(ready);
      await new Promise((resolve) => setTimeout(resolve, killAfterMs));
    } finally {
      for (const r of ranks) r.child.kill("SIGKILL");
    }
  }
  const codes = await Promise.all(ranks.map((r) => r.code));
  if (killAfterMs === undefined && codes.some((c) => c !== 0)) throw new Error(`a rank failed:\n${output()}`);
  const all = ranks.map((r) => r.out).join("\n");
  const checks = all
    .split("\n")
    .filter((l) => l.startsWith("CHECK "))
    .map((l) => JSON.parse(l.slice(6)) as RankCheck)
    .sort((a, b) => a.rank - b.rank);
  return { checks, reports: killAfterMs === undefined ? rankResults<RankReport>(all) : [] };
}

/** The one value a step's copy on `storage` holds (a single-process load of every shard), or why not. */
async function valueOf(storage: StorageAdapter, step: number): Promise<number | string> {
  try {
    const state = (await load({ storage, path: String(step) })) as unknown as {
      w: { data: Float32Array };
      step: number;
    };
    const values = new Set([...state.w.data, state.step]);
    return values.size === 1 ? [...values][0]! : `mixed ${[...values].join(",")}`;
  } catch (error) {
    return String(error);
  }
}

describe("tiered managers on two ranks under saves, rollbacks, planted copies, outages and SIGKILLs (property)", () => {
  for (const seed of SEEDS) {
    const layout = seed % 2 === 0 ? "per-rank" : "shared";
    it(
      `seed ${seed} (tier 0 ${layout}): after each of ${OPERATIONS} random operations every listed step restores on both ranks with its bytes, and no last good copy is gone`,
      { timeout: 240_000 },
      async () => {
        const next = random(seed);
        const pick = (n: number): number => Math.floor(next() * n);
        const dir = await mkdtemp(join(tmpdir(), "cairn-tiered-ranks-"));
        dirs.push(dir);
        const bucket = await openStorage(pathToFileURL(join(dir, "bucket")).href);
        /** Per step: the values any save (or planted copy) gave it since it was last overwritten. */
        const allowed = new Map<number, Set<number>>();
        /** Per step: the value of its latest save by this run's job. */
        const current = new Map<number, number>();
        /** Generations of killed sessions: a save of theirs counts once a check finds it. */
        const killed = new Set<number>();
        const killedSave = (step: number, value: number): boolean =>
          Number.isInteger((value - step) / 1000) && killed.has((value - step) / 1000);
        const log: string[] = [];
        /** Per step: every value it was ever given; a copy a tier held before an overwrite reached it has one of these. */
        const ever = new Map<number, Set<number>>();
        /** Steps a damaged copy was planted under on tier 1. */
        const damaged = new Set<number>();
        const allow = (step: number, value: number, reset = false): void => {
          ever.set(step, (ever.get(step) ?? new Set<number>()).add(value));
          const set = reset ? new Set<number>() : (allowed.get(step) ?? new Set<number>());
          set.add(value);
          allowed.set(step, set);
        };
        const newest = (): number => Math.max(0, ...allowed.keys());

        /** What both ranks restored at a session's start: the state every earlier operation left. */
        const verify = (checks: RankCheck[]): void => {
          const what = `seed ${seed}, after ${log.join("; ")}`;
          expect(
            checks.map((c) => c.rank),
            what,
          ).toEqual([0, 1]);
          expect(checks[1]!.check, `${what}: both ranks list and restore the same`).toEqual(checks[0]!.check);
          const check = checks[0]!.check;
          for (const [key, value] of Object.entries(check)) {
            const step = Number(key);
            if (typeof value === "number") {
              const ok = allowed.get(step)?.has(value) === true || killedSave(step, value);
              expect(ok, `${what}: step ${step} restores ${value}`).toBe(true);
              if (killedSave(step, value)) {
                allow(step, value);
                current.set(step, value);
              }
            } else {
              // Only a step nothing good was ever saved under (a damaged planted copy) may fail to restore.
              expect(allowed.get(step)?.size ?? 0, `${what}: step ${step} is listed but fails: ${value}`).toBe(0);
            }
          }
          killed.clear();
          for (const [step, value] of current)
            expect(check[step], `${what}: step ${step}'s latest save (${value}) is gone or not restored`).toBe(value);
        };

        for (let op = 0; op <= OPERATIONS; op++) {
          const generation = op + 2;
          const roll = op === OPERATIONS ? 0 : next();
          if (roll >= 0.55 && roll < 0.75) {
            const step = newest() + 1 + pick(3);
            if (next() < 0.5) {
              const value = 900_000 + step;
              await save(rowShardedState(value, 0, 1), { storage: bucket, path: String(step) });
              allow(step, value);
              log.push(`another run's ${step} on tier 1`);
            } else {
              const scratch = await openStorage(`memory://tiered-ranks/${seed}-${op}`);
              await save(rowShardedState(-1, 0, 1), { storage: scratch, path: "x" });
              const bytes = await scratch.read("x/metadata.json");
              await bucket.write(`${step}/metadata.json`, bytes.subarray(0, bytes.length >> 1));
              await scratch.close();
              allowed.set(step, allowed.get(step) ?? new Set());
              damaged.add(step);
              log.push(`damaged ${step} on tier 1`);
            }
          } else {
            const last = op === OPERATIONS;
            const known = [...current.keys()].sort((a, b) => a - b);
            const kill = !last && roll >= 0.75 ? 200 + pick(1500) : undefined;
            const rollback =
              !last && kill === undefined && known.length > 3 && next() < 0.3
                ? known[pick(known.length - 2)]
                : undefined;
            // A restarted job whose first call is a save of the next step, which another run may already hold on tier 1.
            const from =
              !last && kill === undefined && rollback === undefined && next() < 0.3 ? newest() + 1 : undefined;
            if (from !== undefined && next() < 0.5) {
              const value = 900_000 + from;
              await save(rowShardedState(value, 0, 1), { storage: bucket, path: String(from) });
              allow(from, value);
              log.push(`another run's ${from} on tier 1`);
            }
            const saves = last ? 0 : 1 + pick(3);
            const downAt = !last && next() < 0.3 ? pick(saves) : -1;
            const plan: RankPlan = {
              generation,
              maxToKeep: 1 + pick(3),
              incremental: next() < 0.4,
              ...(rollback !== undefined ? { rollback } : {}),
              ...(from !== undefined ? { from } : {}),
              overwrite: next() < 0.6,
              saves: Array.from({ length: saves }, () => next() < 0.5),
              downAt,
              upBeforeClose: downAt < 0 || next() < 0.5,
            };
            const { checks, reports } = await session(dir, layout, plan, kill);
            // A session saving first checks after its saves: that check is verified once they are counted.
            if (from === undefined) verify(checks);
            if (kill !== undefined) {
              // Which of its saves are in is known only from what the next check finds.
              killed.add(generation);
              log.push(`both ranks killed ${kill} ms into ${JSON.stringify(plan)}`);
            } else {
              const [r0, r1] = reports as [RankReport, RankReport];
              expect(r1.saved, "both ranks saved and refused the same steps").toEqual(r0.saved);
              for (const r of reports) expect(r.joined, `rank ${r.rank}'s background saves`).toBeUndefined();
              if (r0.rollback) {
                const { step, value } = r0.rollback;
                expect(
                  allowed.get(step)?.has(value as number),
                  `seed ${seed}: rollback to ${step} restores ${value}`,
                ).toBe(true);
              }
              for (const { step, value, ok } of r0.saved) {
                if (!ok) continue;
                allow(step, value, plan.overwrite);
                current.set(step, value);
              }
              if (from !== undefined) log.push(`first call save(${from})`);
              log.push(
                `${r0.rollback ? `rollback to ${r0.rollback.step}, ` : ""}${r0.saved.map((s) => `${s.ok ? "saved" : "refused"} ${s.step}`).join(", ")}${downAt >= 0 ? ` (tier 1 down from save ${downAt}${plan.upBeforeClose ? ", back before close" : ""})` : ""}`,
              );
              if (from !== undefined) verify(checks);
            }
          }
          // Every step tier 1 lists holds bytes saved for it (before an overwrite, if tier 1 was down for it).
          for (const step of await new StepStore(bucket).committedSteps()) {
            const value = await valueOf(bucket, step);
            const ok =
              typeof value === "number"
                ? ever.get(step)?.has(value) === true || killedSave(step, value)
                : damaged.has(step);
            expect(ok, `seed ${seed}, after ${log.join("; ")}: tier 1 step ${step} holds ${value}`).toBe(true);
          }
        }
        if (process.env.CAIRN_TIERED_RANKS_LOG) process.stderr.write(`seed ${seed}: ${log.join("; ")}\n`);
        await bucket.close();
      },
    );
  }
});
