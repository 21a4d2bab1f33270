// A rank's background copy must never leave a collective the other rank waits on: with tier 1
// down, rank 0's failed copies still end every collective rank 1 joined, and close() waits for
// its copies before the group may close, so a rank that closes late sees no broken group.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { rankResults, runTypeScript, typeScriptCommand } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";

const CAIRN_RUN = fileURLToPath(new URL("../../distributed/src/cairn-run.ts", import.meta.url));
const RANK = fileURLToPath(new URL("./fixtures/tiered-close-rank.ts", import.meta.url));
const dirs: string[] = [];
afterAll(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

describe("close() of a two-rank tiered manager while copies to a down tier fail", () => {
  it("resolves on both ranks, and the group still works on the rank that closes 2.5 s later", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-tiered-close-"));
    dirs.push(dir);
    const out = await runTypeScript(CAIRN_RUN, ["--nproc-per-node", "2", ...typeScriptCommand(RANK), dir, "2500"]);
    expect(out.code, `${out.stdout}\n${out.stderr}`).toBe(0);
    const results = rankResults<{ rank: number; closed: string; broadcast: string; replicationErrors: boolean }>(
      out.stdout,
    );
    expect(results).toEqual([
      { rank: 0, closed: "ok", broadcast: "ok", replicationErrors: true },
      { rank: 1, closed: "ok", broadcast: "ok", replicationErrors: true },
    ]);
  }, 120_000);
});
