import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { runRanks } from "./run-ranks.js";

const RANK = fileURLToPath(new URL("./fixtures/tiered-resume-rank.ts", import.meta.url));
const dirs: string[] = [];
afterAll(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

interface Resume {
  latest: number | null;
  restored: boolean;
  saved: boolean | string;
}

describe("the usual resume loop with a tier 0 per rank (issue 30, item 5)", () => {
  it("finds the steps only the ranks' own tier 0 holds while the bucket is down, restores them and saves the next, on every restart", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-tiered-resume-"));
    dirs.push(dir);
    const results = await runRanks<{ rank: number; resumes: Resume[] }>(RANK, [dir]);
    expect(results.map((r) => r.rank)).toEqual([0, 1, 2]);
    for (const r of results)
      expect(r.resumes, `rank ${r.rank}`).toEqual([
        { latest: 2, restored: true, saved: true },
        { latest: 3, restored: true, saved: true },
      ]);
  }, 180_000);
});
