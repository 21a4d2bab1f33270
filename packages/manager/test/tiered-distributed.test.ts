import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { load, readMetadata } from "@cairn/core";
import { afterAll, describe, expect, it } from "vitest";
import { runRanks } from "./run-ranks.js";

const RANK = fileURLToPath(new URL("./fixtures/tiered-rank.ts", import.meta.url));
const dirs: string[] = [];
afterAll(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

interface RankResult {
  rank: number;
  unreplicated: unknown[];
  errors: number;
  latest: number;
  restored: boolean;
  early: number | null;
  earlyRestored: boolean;
  stoppedAt: number | null;
}

function run(args: string[]): Promise<RankResult[]> {
  return runRanks<RankResult>(RANK, args);
}

describe("a tiered CheckpointManager across 3 ranks (real processes), each rank with its own tier 0", () => {
  it("copies each rank's files to the shared tier, commits once all did, retries a rank's failures, and trims every rank's tier 0", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-tiered-dist-"));
    dirs.push(dir);
    const results = await run([dir, "5", "1", "3,4"]);
    expect(results.map((r) => r.rank)).toEqual([0, 1, 2]);
    for (const r of results)
      expect(r).toMatchObject({ unreplicated: [], latest: 5, restored: true, earlyRestored: true });
    // Asked while copies ran, every rank named the same newest step.
    expect(new Set(results.map((r) => r.early)).size).toBe(1);
    // Rank 1's failures were reported (once per outage) on rank 0, which retried, and on rank 1.
    expect(results[0]!.errors).toBeGreaterThanOrEqual(1);
    expect(results[1]!.errors).toBeGreaterThanOrEqual(1);

    // Every step is whole on the shared tier: all three ranks' files and the metadata.
    const bucket = join(dir, "bucket");
    expect((await readdir(bucket)).sort()).toEqual(["1", "2", "3", "4", "5"]);
    for (let step = 1; step <= 5; step++) {
      const metadata = await readMetadata(`file://${bucket}/${step}`);
      expect(new Set(Object.values(metadata.files).map((f) => f.rank))).toEqual(new Set([0, 1, 2]));
      const loaded = (await load(`file://${bucket}/${step}`)) as unknown as { w: { data: Float32Array }; step: number };
      expect(loaded.step).toBe(step);
      expect(loaded.w.data.every((v) => v === step)).toBe(true);
    }
    // Each rank's tier 0 holds its own files of the newest two steps only; rank 0's also the metadata.
    for (let rank = 0; rank < 3; rank++) {
      const local = join(dir, `local-${rank}`);
      expect((await readdir(local)).sort(), `rank ${rank}`).toEqual(["4", "5"]);
      const names = await readdir(join(local, "5"));
      expect(names.filter((n) => n.endsWith(".safetensors")).every((n) => n.startsWith(`data-r${rank}-`))).toBe(true);
      expect(names.includes("metadata.json")).toBe(rank === 0);
    }
  }, 180_000);

  it("a SIGTERM on one rank: every rank saves the agreed step to its own tier 0, and close() copies it to the shared tier", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-tiered-dist-"));
    dirs.push(dir);
    const results = await run([dir, "1000", "9", "", "2", "6"]);
    const stopped = results.map((r) => r.stoppedAt);
    expect(stopped[0]).toBeGreaterThanOrEqual(6);
    expect(stopped).toEqual([stopped[0], stopped[0], stopped[0]]);
    for (const r of results) expect(r).toMatchObject({ unreplicated: [], latest: stopped[0], restored: true });
    const metadata = await readMetadata(`file://${join(dir, "bucket")}/${stopped[0]}`);
    expect(new Set(Object.values(metadata.files).map((f) => f.rank))).toEqual(new Set([0, 1, 2]));
    for (let rank = 0; rank < 3; rank++)
      expect(await readdir(join(dir, `local-${rank}`))).toEqual([String(stopped[0])]);
  }, 180_000);
});
