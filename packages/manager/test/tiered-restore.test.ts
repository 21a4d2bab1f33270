import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { runRanks } from "./run-ranks.js";

const RANK = fileURLToPath(new URL("./fixtures/tiered-restore-rank.ts", import.meta.url));
const dirs: string[] = [];
afterAll(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

interface RankResult {
  rank: number;
  unreplicated: unknown[];
  /** The step latestStep() named, or the code it threw. */
  latest: number | string | null;
  restored: boolean;
  from: string | null;
  failure: string | null;
  restoreErrors: { tier?: number; code?: string }[];
}

async function run(damagedRank: string, brokenRank?: string): Promise<{ dir: string; results: RankResult[] }> {
  const dir = await mkdtemp(join(tmpdir(), "cairn-tiered-restore-"));
  dirs.push(dir);
  const results = await runRanks<RankResult>(RANK, [
    dir,
    damagedRank,
    ...(brokenRank === undefined ? [] : [brokenRank]),
  ]);
  expect(results.map((r) => r.rank)).toEqual([0, 1, 2]);
  return { dir, results };
}

describe("a tiered restore across 3 ranks (real processes), each rank with its own tier 0", () => {
  it("reads every rank's own tier 0 when each holds its files of the step", async () => {
    const { dir, results } = await run("");
    for (const r of results) {
      expect(r).toMatchObject({ unreplicated: [], latest: 2, restored: true, failure: null, restoreErrors: [] });
      expect(r.from, `rank ${r.rank}`).toBe(`file://${join(dir, `local-${r.rank}`)}/2`);
    }
  }, 180_000);

  it("one rank's tier-0 copy damaged: that rank reports it and every rank reads the step from the shared tier", async () => {
    const { dir, results } = await run("1");
    for (const r of results) {
      expect(r, `rank ${r.rank}`).toMatchObject({ unreplicated: [], latest: 2, restored: true, failure: null });
      expect(r.from, `rank ${r.rank}`).toBe(`file://${join(dir, "bucket")}/2`);
    }
    expect(results.map((r) => r.restoreErrors)).toEqual([[], [{ tier: 0, code: "corrupt" }], []]);
  }, 180_000);

  it("one rank cannot open the shared tier: latestStep refuses on every rank, restores go on without it, and when no tier serves every rank, every rank fails", async () => {
    // Every rank's tier 0 holds the step: read there, the shared tier is not needed.
    const fine = await run("", "2");
    for (const r of fine.results)
      expect(r, `rank ${r.rank}`).toMatchObject({
        latest: "storage",
        restored: true,
        failure: null,
        from: `file://${join(fine.dir, `local-${r.rank}`)}/2`,
      });
    // Rank 1's copy is damaged too: no tier serves every rank, and every rank's restore fails (none waits forever).
    const { results } = await run("1", "2");
    for (const r of results) expect(r, `rank ${r.rank}`).toMatchObject({ from: null, failure: expect.any(String) });
    // Each throws the first failure: rank 1's damaged copy on tier 0 (rank 2's own comes later, reported).
    expect(results.map((r) => r.failure)).toEqual(["corrupt", "corrupt", "corrupt"]);
    expect(results.map((r) => r.restoreErrors)).toEqual([
      [],
      [{ tier: 0, code: "corrupt" }],
      [{ tier: 1, code: "permission_denied" }],
    ]);
  }, 180_000);
});
