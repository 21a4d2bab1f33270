import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { runRanks } from "./run-ranks.js";

const RANK = fileURLToPath(new URL("./fixtures/identity-rank.ts", import.meta.url));

// overwrite-identity.test.ts on one rank; here the ranks' collective restore (restoreAcrossRanks).
describe("3 ranks, each with its own tier 0, and a bucket that kept an overwritten step's old copy", () => {
  it('restore("latest") skips the step whose only copy of this checkpoint is damaged, and restore(2) fails, on every rank', async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-ranks-identity-"));
    try {
      const results = await runRanks<{
        rank: number;
        restored: unknown;
        values: number[];
        skipped: number[];
        two: { values?: number[]; code?: string };
      }>(RANK, [dir]);
      expect(results.map((r) => r.rank)).toEqual([0, 1, 2]);
      for (const r of results) {
        // Step 1's weights: never the abandoned step 2 (2), nor a mix.
        expect(r.values, `rank ${r.rank}: ${JSON.stringify(r.restored)}`).toEqual([1]);
        expect(r.skipped).toContain(2);
        // Asked for by number, step 2 is not served from the bucket's copy of the abandoned checkpoint.
        expect(r.two, `rank ${r.rank}`).toEqual({ code: "corrupt" });
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 180_000);
});
