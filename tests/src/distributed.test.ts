import { readdir, stat } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { type DType, load, readMetadata, save } from "@cairn/core";
import { itemSize, numel } from "@cairn/core/format";
import { freePort } from "@cairn/distributed";
import { type RankResult, rankResults, runTypeScript, spawnTypeScript } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { TENSORS } from "./fixtures/distributed-state.js";
import { tempDir } from "./helpers.js";

const RANK_SCRIPT = fileURLToPath(new URL("./fixtures/distributed-rank.ts", import.meta.url));
const CAIRN_RUN = fileURLToPath(new URL("../../packages/distributed/src/cairn-run.ts", import.meta.url));

/** Runs `ranks` ranks of the rank script through the real launcher, as a user would. */
async function launch(ranks: number, args: string[]): Promise<RankResult[]> {
  const run = await runTypeScript(CAIRN_RUN, ["--nproc-per-node", String(ranks), RANK_SCRIPT, ...args]);
  if (run.code !== 0) throw new Error(`cairn-run exited ${run.code}\n${run.stdout}\n${run.stderr}`);
  return rankResults(run.stdout);
}

const uniqueBytes = TENSORS.reduce((n, t) => n + numel(t.shape) * itemSize(t.dtype as DType), 0) + 300 * 4;

describe("distributed save and resharding load across real processes", () => {
  it("saves from 4 row-sharded ranks, writing replicated tensors once, and loads bit-exact into 1, 2 and 3 ranks of any layout", async () => {
    const url = `file://${await tempDir()}/ckpt`;
    const saved = await launch(4, ["save", url, "rows"]);
    expect(saved.map((r) => r.rank)).toEqual([0, 1, 2, 3]);

    const metadata = await readMetadata(url);
    expect(metadata.worldSize).toBe(4);
    const dataBytes = Object.values(metadata.files).reduce((n, f) => n + f.size - 8 - f.headerLength, 0);
    // Replicated `bias` is on all four ranks and written once: the data files hold the unique bytes, no more.
    expect(dataBytes).toBe(uniqueBytes);
    expect(saved.reduce((n, r) => n + (r.bytes as number), 0)).toBe(
      Object.values(metadata.files).reduce((n, f) => n + f.size, 0),
    );
    const bias = metadata.entries.find((e) => e.key.at(-1) === "bias");
    expect(bias?.kind === "tensor" && bias.chunks.length).toBe(1);
    const w = metadata.entries.find((e) => e.key.at(-1) === "w");
    expect(w?.kind === "tensor" && w.chunks.map((c) => c.offsets)).toEqual([
      [0, 0],
      [250, 0],
      [500, 0],
      [750, 0],
    ]);

    for (const ranks of [1, 2, 3]) {
      const loaded = await launch(ranks, ["load", url, "cols", "blocks", "rows"]);
      expect(loaded).toHaveLength(ranks * 3);
      for (const r of loaded) {
        expect(r.mismatches, `rank ${r.rank} of ${ranks}, ${r.layout as string}`).toBe(0);
        const amplification = ((r.bytesRead as number) - (r.overhead as number)) / (r.needed as number);
        console.log(
          `load 4→${ranks} ranks, ${r.layout as string}, rank ${r.rank}: read ${r.bytesRead as number} B for ${r.needed as number} B needed (${amplification.toFixed(2)}× after metadata and headers)`,
        );
        if (r.layout === "rows") {
          // Row-sharded to row-sharded: what it needs plus at most 10 %, plus rounding to whole checksum blocks.
          expect((r.bytesRead as number) - (r.overhead as number)).toBeLessThanOrEqual(
            1.1 * (r.needed as number) + (r.roundingAllowance as number),
          );
        }
      }
    }
    // A load without a process group (world size 1, no target) rebuilds the global tensors too.
    const whole = (await load(url)) as unknown as { model: { w: { data: Float32Array } } };
    expect(whole.model.w.data[300 * 999 + 299]).toBe(((300 * 999 + 299) * 7) % 1_000_003);
  }, 240_000);

  it("commits nothing when a rank is killed mid-save: the others reject naming it, and the previous checkpoint still loads", async () => {
    const dir = await tempDir();
    await save({ before: 1 }, `file://${dir}/1`);
    const port = await freePort();
    const children = [0, 1, 2].map((rank) =>
      spawnTypeScript(RANK_SCRIPT, ["die-mid-save", `file://${dir}/2`, "2"], {
        env: {
          RANK: String(rank),
          WORLD_SIZE: "3",
          MASTER_ADDR: "127.0.0.1",
          MASTER_PORT: String(port),
          CAIRN_TEST_TIMEOUT_MS: "60000",
        },
      }),
    );
    const outputs = await Promise.all(
      children.map(
        (child) =>
          new Promise<{ stdout: string; signal: NodeJS.Signals | null }>((resolve) => {
            let stdout = "";
            child.stdout!.on("data", (d: Buffer) => (stdout += d.toString()));
            child.once("close", (_code, signal) => resolve({ stdout, signal }));
          }),
      ),
    );
    expect(outputs[2]!.signal).toBe("SIGKILL");
    const survivors = rankResults(outputs[0]!.stdout + outputs[1]!.stdout);
    expect(survivors).toHaveLength(2);
    for (const r of survivors) {
      expect(r).toMatchObject({ ok: false, code: "process_group" });
      expect(r.message).toMatch(/rank 2 disconnected/);
    }
    // Nothing committed (survivors removed their files; the dead rank's partial file may remain, uncommitted).
    await expect(readMetadata(`file://${dir}/2`)).rejects.toMatchObject({
      code: expect.stringMatching(/not_committed|not_found/),
    });
    const left = await readdir(`${dir}/2`).catch(() => []);
    expect(left.filter((f) => !f.includes("data-r2-"))).toEqual([]);
    expect(await load(`file://${dir}/1`)).toEqual({ before: 1 });
    expect((await stat(`${dir}/1/metadata.json`)).isFile()).toBe(true);
  }, 120_000);

  it("cairn-run stops the other ranks and exits with the failing rank's code", async () => {
    const run = await runTypeScript(CAIRN_RUN, [
      "-n",
      "3",
      "--",
      process.execPath,
      "-e",
      "if (process.env.RANK === '1') process.exit(7); setTimeout(() => {}, 60000)",
    ]);
    expect(run.code).toBe(7);
    expect(run.stderr).toMatch(/rank 1 failed with exit code 7; the other ranks were stopped/);
  }, 60_000);
});
