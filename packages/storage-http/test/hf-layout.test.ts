// hf+http:// composes: a Hugging Face layout on a static web server, loaded without importing,
// only the byte ranges a target needs fetched.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { hostTensor, load, readMetadata, save, shardedTensor } from "@cairn/core";
import { CheckpointReader, exportSafetensorsLayout } from "@cairn/core/ops";
import { openStorage } from "@cairn/core/storage";
import "@cairn/storage-local";
import { afterAll, describe, expect, it } from "vitest";
import "../src/index.js";
import { type TestServer, startServer } from "./http-servers.js";

let dir: string | undefined;
let server: TestServer | undefined;
afterAll(async () => {
  await server?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("hf+http://: a Hugging Face layout served over HTTP", () => {
  it("loads a column slice through ranged GETs of the shards, bit-exact, and the whole layout", async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-hf-http-"));
    const w = hostTensor("float32", [256, 64]);
    w.data.forEach((_, i) => (w.data[i] = Math.sin(i)));
    const b = hostTensor("float32", [64]);
    b.data.forEach((_, i) => (b.data[i] = i));
    await save({ model: { w, b } }, join(dir, "ckpt"));
    const storage = await openStorage(dir);
    const reader = new CheckpointReader(storage, "ckpt", await readMetadata(join(dir, "ckpt")));
    await exportSafetensorsLayout(reader, { storage, dir: "model", where: "model" }, { maxShardBytes: 40_000 });
    await reader.close();
    await storage.close();
    server = await startServer(dir, "ranges");

    const slice = hostTensor("float32", [256, 8]);
    await load(
      { model: { w: shardedTensor("float32", [256, 64], [{ offsets: [0, 8], tensor: slice }]) } },
      `hf+${server.origin}/model`,
    );
    for (let r = 0; r < 256; r++)
      for (let c = 0; c < 8; c++) expect(slice.data[r * 8 + c]).toBe(w.data[r * 64 + 8 + c]);
    // The index once, then ranges: no GET of a whole shard.
    const gets = server.requests.filter((r) => /^GET \S+\.safetensors( |$)/.test(r));
    expect(gets.length).toBeGreaterThan(0);
    expect(gets.filter((r) => !r.includes("bytes="))).toEqual([]);

    const whole = (await load(`hf+${server.origin}/model/model.safetensors.index.json`)) as unknown as {
      model: { w: { data: Float32Array }; b: { data: Float32Array } };
    };
    expect(whole.model.w.data).toEqual(w.data);
    expect(whole.model.b.data).toEqual(b.data);
  });
});
