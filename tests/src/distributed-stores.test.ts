// The distributed tests of distributed.test.ts, with the ranks meeting on real etcd and Redis
// servers (CAIRN_STORE) instead of rank 0's embedded TCP server.
import { randomUUID } from "node:crypto";
import { readdir } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { load, readMetadata, save } from "@cairn/core";
import { type RankResult, rankResults, runTypeScript, spawnTypeScript, typeScriptCommand } from "@cairn/core/testing";
import { type TestServer, startEtcd, startRedis } from "./store-servers.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tempDir } from "./helpers.js";

const RANK_SCRIPT = fileURLToPath(new URL("./fixtures/distributed-rank.ts", import.meta.url));
const MANAGER_RANK = fileURLToPath(new URL("../../packages/manager/test/fixtures/manager-rank.ts", import.meta.url));
const CAIRN_RUN = fileURLToPath(new URL("../../packages/distributed/src/cairn-run.ts", import.meta.url));

describe.each([
  ["etcd", startEtcd],
  ["redis", startRedis],
])("distributed save, load and preemption with the ranks meeting on a real %s server", (_name, startServer) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startServer();
  }, 60_000);
  afterAll(async () => server?.stop());

  async function launch(ranks: number, script: string, args: string[]): Promise<RankResult[]> {
    const run = await runTypeScript(CAIRN_RUN, [
      "--nproc-per-node",
      String(ranks),
      "--store",
      server.url,
      // The script under spawnTypeScript's loader (how cairn-run starts a .ts script: distributed.test.ts).
      ...typeScriptCommand(script),
      ...args,
    ]);
    if (run.code !== 0) throw new Error(`cairn-run exited ${run.code}\n${run.stdout}\n${run.stderr}`);
    return rankResults(run.stdout);
  }

  it("saves from 4 row-sharded ranks and loads bit-exact into 3 ranks of another layout", async () => {
    const url = `file://${await tempDir()}/ckpt`;
    const saved = await launch(4, RANK_SCRIPT, ["save", url, "rows"]);
    expect(saved.map((r) => r.rank)).toEqual([0, 1, 2, 3]);
    expect((await readMetadata(url)).worldSize).toBe(4);
    const loaded = await launch(3, RANK_SCRIPT, ["load", url, "cols"]);
    expect(loaded.map((r) => [r.rank, r.mismatches])).toEqual([
      [0, 0],
      [1, 0],
      [2, 0],
    ]);
  }, 120_000);

  it("a SIGTERM on one rank makes all three checkpoint at the same step", async () => {
    const dir = await tempDir();
    const ranks = await launch(3, MANAGER_RANK, [`file://${dir}`, "1000", "50", "3", "1", "8"]);
    const stopped = ranks.map((r) => r.stoppedAt as number);
    expect(stopped[0]).toBeGreaterThanOrEqual(8);
    expect(stopped).toEqual([stopped[0], stopped[0], stopped[0]]);
    for (const r of ranks) expect(r).toMatchObject({ restored: true, restoredStep: stopped[0] });
  }, 120_000);

  it("commits nothing when a rank is killed mid-save: once its lease expires the others reject naming it", async () => {
    const dir = await tempDir();
    await save({ before: 1 }, `file://${dir}/1`);
    const env = {
      WORLD_SIZE: "3",
      CAIRN_STORE: server.url,
      CAIRN_RUN_ID: randomUUID(),
      CAIRN_STORE_LEASE_MS: "2000",
      CAIRN_TEST_TIMEOUT_MS: "60000",
    };
    const outputs = await Promise.all(
      [0, 1, 2].map(
        (rank) =>
          new Promise<{ stdout: string; signal: NodeJS.Signals | null }>((resolve) => {
            const child = spawnTypeScript(RANK_SCRIPT, ["die-mid-save", `file://${dir}/2`, "2"], {
              env: { ...env, RANK: String(rank) },
            });
            let stdout = "";
            child.stdout!.on("data", (d: Buffer) => (stdout += d.toString()));
            child.once("close", (_code, signal) => resolve({ stdout, signal }));
          }),
      ),
    );
    expect(outputs[2]!.signal).toBe("SIGKILL");
    const survivors = rankResults(outputs[0]!.stdout + outputs[1]!.stdout);
    expect(survivors).toHaveLength(2);
    for (const r of survivors)
      expect(r).toMatchObject({
        ok: false,
        code: "process_group",
        message: expect.stringMatching(/rank 2 disconnected: its liveness key/),
      });
    await expect(readMetadata(`file://${dir}/2`)).rejects.toMatchObject({
      code: expect.stringMatching(/not_committed|not_found/),
    });
    const left = await readdir(`${dir}/2`).catch(() => []);
    expect(left.filter((f) => !f.includes("data-r2-"))).toEqual([]);
    expect(await load(`file://${dir}/1`)).toEqual({ before: 1 });
  }, 120_000);
});
