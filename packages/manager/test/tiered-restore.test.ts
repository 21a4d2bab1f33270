import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { runTypeScript } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";

const RANK = fileURLToPath(new URL("./fixtures/tiered-restore-rank.ts", import.meta.url));
const CAIRN_RUN = fileURLToPath(new URL("../../distributed/src/cairn-run.ts", import.meta.url));
const dirs: string[] = [];
afterAll(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

interface RankResult {
  rank: number;
  unreplicated: unknown[];
  latest: number;
  restored: boolean;
  from: string;
  restoreErrors: { tier?: number; code?: string }[];
}

async function run(damagedRank: string): Promise<{ dir: string; results: RankResult[] }> {
  const dir = await mkdtemp(join(tmpdir(), "cairn-tiered-restore-"));
  dirs.push(dir);
  const out = await runTypeScript(CAIRN_RUN, ["--nproc-per-node", "3", RANK, dir, damagedRank]);
  if (out.code !== 0) throw new Error(`cairn-run exited ${out.code}\n${out.stdout}\n${out.stderr}`);
  const results = out.stdout
    .split("\n")
    .filter((l) => l.includes("RESULT "))
    .map((l) => JSON.parse(l.slice(l.indexOf("RESULT ") + 7)) as RankResult)
    .sort((a, b) => a.rank - b.rank);
  expect(results.map((r) => r.rank)).toEqual([0, 1, 2]);
  return { dir, results };
}

describe("a tiered restore across 3 ranks (real processes), each rank with its own tier 0", () => {
  it("reads every rank's own tier 0 when each holds its files of the step", async () => {
    const { dir, results } = await run("");
    for (const r of results) {
      expect(r).toMatchObject({ unreplicated: [], latest: 2, restored: true, restoreErrors: [] });
      expect(r.from, `rank ${r.rank}`).toBe(`file://${join(dir, `local-${r.rank}`)}/2`);
    }
  }, 180_000);

  it("one rank's tier-0 copy damaged: that rank reports it and every rank reads the step from the shared tier", async () => {
    const { dir, results } = await run("1");
    for (const r of results) {
      expect(r, `rank ${r.rank}`).toMatchObject({ unreplicated: [], latest: 2, restored: true });
      expect(r.from, `rank ${r.rank}`).toBe(`file://${join(dir, "bucket")}/2`);
    }
    expect(results.map((r) => r.restoreErrors)).toEqual([[], [{ tier: 0, code: "corrupt" }], []]);
  }, 180_000);
});
