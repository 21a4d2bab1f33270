import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { runRanks } from "./run-ranks.js";

const RANK = fileURLToPath(new URL("./fixtures/budget-rank.ts", import.meta.url));
const dirs: string[] = [];
afterAll(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

interface RankResult {
  rank: number;
  newestSaved: number;
  newestDurable: number | null;
  stepsAtRisk: number;
  durable: number[];
  unreplicated: unknown[];
}

// Found by the multi-rank attack on the loss budget: only rank 0 heard that a step reached the
// shared tier, so every other rank's budget filled up and "block" stopped it for good while rank
// 0 went on into the next save's collectives.
describe("the loss budget across 3 ranks (real processes), each with its own tier 0 and a shared tier", () => {
  it('every rank hears each step become durable: "block" lets them all go on together, and health() agrees', async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-ranks-budget-"));
    dirs.push(dir);
    const results = await runRanks<RankResult>(RANK, [dir, "5"]);
    expect(results.map((r) => r.rank)).toEqual([0, 1, 2]);
    for (const r of results) {
      expect(r, `rank ${r.rank}`).toMatchObject({ newestSaved: 5, newestDurable: 5, stepsAtRisk: 0, unreplicated: [] });
      expect(r.durable, `rank ${r.rank}`).toEqual([1, 2, 3, 4, 5]);
    }
  }, 240_000);
});
