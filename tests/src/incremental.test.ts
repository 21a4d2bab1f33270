import "@tensorflow/tfjs-backend-cpu";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import * as tf from "@tensorflow/tfjs-core";
import { type HostTensor, asyncSave, hostTensor, load, readMetadata, save } from "@cairn/core";
import { rankResults, runTypeScript, typeScriptCommand } from "@cairn/core/testing";
import { beforeAll, describe, expect, it } from "vitest";
import { shard } from "./fixtures/incremental-rank.js";
import { flipByte, tempDir } from "./helpers.js";

const RANK_SCRIPT = fileURLToPath(new URL("./fixtures/incremental-rank.ts", import.meta.url));
const CAIRN_RUN = fileURLToPath(new URL("../../packages/distributed/src/cairn-run.ts", import.meta.url));

beforeAll(async () => {
  await tf.setBackend("cpu");
});

function frozen(): HostTensor {
  return hostTensor(
    "float32",
    [512, 128],
    Float32Array.from({ length: 512 * 128 }, (_, i) => i * 0.25),
  );
}

describe.each(["copy", "reference"] as const)("an incremental asyncSave with %s staging", (staging) => {
  it("writes the changed tensors only, loads back whole, and a flipped bit in the base's file is found loading the newer step", async () => {
    const root = await tempDir();
    const embedding = tf.tensor2d(
      Array.from({ length: 256 * 64 }, (_, i) => i % 7),
      [256, 64],
    );
    const head = tf.variable(tf.zeros([64, 16]));
    const frozenHost = frozen();
    const first = await asyncSave(
      { embedding, head, frozen: frozenHost, step: 1 },
      { checkpointId: `file://${root}/1`, staging },
    );
    await first.staged;
    const full = await first.done;
    head.assign(tf.ones([64, 16]));
    const second = await asyncSave(
      { embedding, head, frozen: frozenHost, step: 2 },
      { checkpointId: `file://${root}/2`, staging, incremental: { base: "1" } },
    );
    await second.staged;
    head.assign(tf.fill([64, 16], 5));
    const result = await second.done;
    // Only the head (4 KiB) and its file's header are written; the embedding and the frozen tensor (320 KiB) are referenced.
    expect(result.bytes).toBeGreaterThanOrEqual(64 * 16 * 4);
    expect(result.bytes).toBeLessThan(64 * 16 * 4 + 512);
    expect(full.bytes).toBeGreaterThan(300_000);
    const back = (await load(`file://${root}/2`)) as Record<string, HostTensor>;
    expect(back.head!.data).toEqual(new Float32Array(64 * 16).fill(1));
    expect(back.embedding!.data).toEqual(Float32Array.from({ length: 256 * 64 }, (_, i) => i % 7));
    expect(back.frozen!.data).toEqual(frozenHost.data);
    expect(back.step).toBe(2);

    const metadata = await readMetadata(`file://${root}/2`);
    const [name, file] = Object.entries(metadata.files).find(([, f]) => f.dir === "1")!;
    await flipByte(join(root, "1", name), file.size - 3);
    await expect(load(`file://${root}/2`)).rejects.toMatchObject({
      code: "corrupt",
      message: expect.stringContaining("checksum mismatch"),
    });
    embedding.dispose();
    head.dispose();
  });
});

describe("incremental saves across real processes", () => {
  it(
    "two ranks each write only their changed shard; the step loads whole in another process",
    { timeout: 60_000 },
    async () => {
      const root = await tempDir();
      const run = await runTypeScript(CAIRN_RUN, [
        "--nproc-per-node",
        "2",
        ...typeScriptCommand(RANK_SCRIPT),
        `file://${root}`,
      ]);
      expect(run.code, run.stderr).toBe(0);
      const ranks = rankResults(run.stdout);
      expect(ranks).toHaveLength(2);
      const shardBytes = 32 * 256 * 4;
      for (const r of ranks) {
        expect(r.full as number).toBeGreaterThanOrEqual(2 * shardBytes);
        expect(r.incremental as number).toBeGreaterThanOrEqual(shardBytes);
        expect(r.incremental as number).toBeLessThan(shardBytes + 512);
        expect((r.referenced as string[]).every((p) => p.startsWith("1/"))).toBe(true);
      }
      expect(await readFile(join(root, "2", "metadata.json"), "utf8")).toContain('"version":"2.2"');
      const back = (await load(`file://${root}/2`)) as Record<string, HostTensor>;
      const rows = (seed: number): Float32Array =>
        Float32Array.from([...shard(0, 2, 64, seed), ...shard(1, 2, 64, seed)]);
      expect(back.trained!.data).toEqual(rows(2));
      expect(back.frozen!.data).toEqual(rows(0));
    },
  );

  it("a full save of the same state writes every byte again (the baseline the skipping is measured against)", async () => {
    const root = await tempDir();
    const state = { frozen: frozen() };
    const a = await save(state, join(root, "1"));
    const b = await save(state, join(root, "2"));
    const c = await save(state, { checkpointId: join(root, "3"), incremental: { base: "2" } });
    expect(b.bytes).toBe(a.bytes);
    expect(c.bytes).toBe(0);
    expect(c.files).toBe(0);
  });
});
