import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { readMetadata } from "@cairn/core";
import { afterAll, describe, expect, it } from "vitest";
import { runRanks } from "./run-ranks.js";

const RANK = fileURLToPath(new URL("./fixtures/tiered-incremental-rank.ts", import.meta.url));
const dirs: string[] = [];
afterAll(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

interface RankResult {
  rank: number;
  unreplicated: unknown[];
  retentionFailures: number;
  errors: number;
  kept: number[];
  restored: { step: number; from: string | null; exact: boolean }[];
}

const STEPS = 8;

async function run(dir: string, shared: boolean): Promise<RankResult[]> {
  const results = await runRanks<RankResult>(RANK, [dir, String(STEPS), ...(shared ? ["shared"] : [])]);
  expect(results.map((r) => r.rank)).toEqual([0, 1, 2]);
  return results;
}

/** What the kept steps use, by rank (from rank 0's metadata): their own files, the files of other steps they reference, and their metadata (rank 0's). */
async function usedFiles(
  metadataRoot: string,
  kept: readonly number[],
): Promise<{ used: Set<string>[]; deletedReferenced: Set<number> }> {
  const used: Set<string>[] = [new Set(), new Set(), new Set()];
  const deletedReferenced = new Set<number>();
  for (const step of kept) {
    const metadata = await readMetadata(`file://${metadataRoot}/${step}`);
    for (const [name, file] of Object.entries(metadata.files)) {
      used[file.rank]!.add(`${file.dir ?? step}/${name}`);
      if (file.dir !== undefined && !kept.includes(Number(file.dir))) deletedReferenced.add(file.rank);
    }
    used[0]!.add(`${step}/metadata.json`);
  }
  return { used, deletedReferenced };
}

const filesUnder = async (root: string): Promise<string[]> =>
  (await readdir(root, { recursive: true })).filter((p) => p.includes("/")).sort();

describe("incremental saves with a tiered manager across 3 ranks (real processes)", () => {
  const kept = [STEPS - 1, STEPS];

  it("each rank with its own tier 0: every rank deletes exactly the files of deleted steps no kept step uses; kept steps restore from every rank's tier 0", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-tiered-ranks-incr-"));
    dirs.push(dir);
    const results = await run(dir, false);
    // Tier 0 kept the newest two steps; each restores exactly, on every rank, from that rank's own tier 0.
    for (const r of results) {
      expect(r, `rank ${r.rank}`).toMatchObject({ unreplicated: [], retentionFailures: 0, errors: 0, kept });
      expect(r.restored, `rank ${r.rank}`).toEqual(
        kept.map((step) => ({ step, from: `file://${join(dir, `local-${r.rank}`)}/${step}`, exact: true })),
      );
    }
    const { used, deletedReferenced } = await usedFiles(join(dir, "local-0"), kept);
    // Kept steps use files of deleted steps (the frozen tensor's, from step 1): the sweeps had to keep them.
    expect(deletedReferenced.size).toBeGreaterThanOrEqual(1);
    for (let rank = 0; rank < 3; rank++)
      expect(await filesUnder(join(dir, `local-${rank}`)), `rank ${rank}'s tier 0`).toEqual([...used[rank]!].sort());
  }, 180_000);

  it("every rank's tier 0 one directory: no rank's deletions take a file a kept step uses, whichever rank wrote it", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-tiered-ranks-incr-"));
    dirs.push(dir);
    const results = await run(dir, true);
    const local = join(dir, "local-shared");
    for (const r of results) {
      expect(r, `rank ${r.rank}`).toMatchObject({ unreplicated: [], retentionFailures: 0, errors: 0, kept });
      expect(r.restored, `rank ${r.rank}`).toEqual(
        kept.map((step) => ({ step, from: `file://${local}/${step}`, exact: true })),
      );
    }
    const { used, deletedReferenced } = await usedFiles(local, kept);
    // Here every rank saves incrementally: kept steps use every rank's files of deleted steps.
    expect([...deletedReferenced].sort()).toEqual([0, 1, 2]);
    expect(await filesUnder(local)).toEqual(used.flatMap((u) => [...u]).sort());
  }, 180_000);
});
