import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cp, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type HostTensor, load, save } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { DTYPE_NAMES, rewriteMetadata, sampleTensor, tempDir } from "./helpers.js";
import { pythonWithNumpy } from "./python.js";

const reader = fileURLToPath(new URL("../../docs/read_checkpoint.py", import.meta.url));

const ENABLE = "needs python3 with numpy: `sudo apt-get install python3-numpy` or `pip install numpy`";

describe("docs/format.md is enough to read a checkpoint with json and numpy", () => {
  it("docs/read_checkpoint.py reads every dtype bit-exact, verifies every CRC32C and finds valid safetensors files", async ({
    skip,
  }) => {
    const python = pythonWithNumpy(skip, ENABLE);
    const dir = join(await tempDir(), "ckpt");
    const tensors: Record<string, HostTensor> = {};
    for (const dtype of DTYPE_NAMES) {
      tensors[`${dtype}.matrix`] = sampleTensor(dtype, [3, 5], 3);
      tensors[`${dtype}.scalar`] = sampleTensor(dtype, [], 4);
      tensors[`${dtype}.empty`] = sampleTensor(dtype, [0, 2], 5);
    }
    const big = sampleTensor("float32", [300, 100], 6);
    await save({ tensors, big, blob: Uint8Array.of(1, 2, 3), step: 42 }, { checkpointId: dir, blockSize: 4096 });

    const output = execFileSync(python, [reader, dir, "--json", "--verify", "--check-safetensors"], {
      encoding: "utf8",
    });
    const lines = output
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { key: (string | number)[]; sha256?: string; shape?: number[]; value?: unknown });
    const byKey = new Map(lines.map((l) => [JSON.stringify(l.key), l]));
    const digest = (t: HostTensor): string =>
      createHash("sha256")
        .update(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength))
        .digest("hex");
    for (const [name, t] of Object.entries(tensors)) {
      const line = byKey.get(JSON.stringify(["tensors", name]));
      expect(line?.shape, name).toEqual(t.shape);
      expect(line?.sha256, name).toBe(digest(t));
    }
    expect(byKey.get(JSON.stringify(["big"]))?.sha256).toBe(digest(big));
    expect(byKey.get(JSON.stringify(["blob"]))?.sha256).toBe(
      createHash("sha256")
        .update(Uint8Array.of(1, 2, 3))
        .digest("hex"),
    );
    expect(byKey.get(JSON.stringify(["step"]))?.value).toBe(42);
  });

  it("docs/read_checkpoint.py checks metadata.json's own checksum: a changed value fails it, as it fails load", async ({
    skip,
  }) => {
    const python = pythonWithNumpy(skip, ENABLE);
    const dir = join(await tempDir(), "ckpt");
    await save({ step: 42, w: sampleTensor("float32", [4]) }, dir);
    const path = join(dir, "metadata.json");
    const text = await readFile(path, "utf8");
    expect(text).toContain('["v",[0,"step"],42]');
    await writeFile(path, text.replace('["v",[0,"step"],42]', '["v",[0,"step"],43]'));
    const run = spawnSync(python, [reader, dir, "--json"], { encoding: "utf8" });
    expect(run.status).not.toBe(0);
    expect(run.stderr).toContain("metadata.json does not match its checksum");
    await expect(load(dir)).rejects.toMatchObject({ code: "corrupt" });
    // Without the checksum field, 2.0 metadata is refused.
    const { metadataCrc32c: _, ...metadata } = JSON.parse(text) as Record<string, unknown>;
    await writeFile(path, JSON.stringify(metadata));
    expect(spawnSync(python, [reader, dir, "--json"], { encoding: "utf8" }).stderr).toContain(
      "must open with its checksum",
    );
  });

  it("docs/read_checkpoint.py reads and verifies a stored format 1.1 checkpoint, and one of 1.0 without the checksum", async ({
    skip,
  }) => {
    const python = pythonWithNumpy(skip, ENABLE);
    const dir = join(await tempDir(), "old");
    await cp(fileURLToPath(new URL("../fixtures/checkpoint-1.1", import.meta.url)), dir, { recursive: true });
    const lines = (): string =>
      execFileSync(python, [reader, dir, "--json", "--verify", "--check-safetensors"], { encoding: "utf8" });
    const expected = (await load(dir)) as { model: { layers: { w: HostTensor }[] } };
    const digest = createHash("sha256").update(new Uint8Array(expected.model.layers[1]!.w.data.buffer)).digest("hex");
    expect(lines()).toContain(digest);
    expect(lines()).toContain('"value": 7');
    const path = join(dir, "metadata.json");
    const { metadataCrc32c: _, ...metadata } = JSON.parse(await readFile(path, "utf8")) as Record<string, unknown>;
    await writeFile(path, JSON.stringify({ ...metadata, version: "1.0" }));
    expect(lines()).toContain(digest);
  });

  it("docs/read_checkpoint.py reads an incremental step (2.1, 2.2) from its base's files, and refuses a dir that is not a plain name", async ({
    skip,
  }) => {
    const python = pythonWithNumpy(skip, ENABLE);
    const root = await tempDir();
    const frozen = sampleTensor("float32", [64, 32], 1);
    await save({ frozen, trained: sampleTensor("float32", [8], 2) }, join(root, "1"));
    const trained = sampleTensor("float32", [8], 3);
    await save({ frozen, trained }, { checkpointId: join(root, "2"), incremental: { base: "1" } });
    const text = await readFile(join(root, "2", "metadata.json"), "utf8");
    expect(text).toContain('"version":"2.2"');
    expect(text).toContain('"dir":"1"');
    const output = execFileSync(python, [reader, join(root, "2"), "--json", "--verify", "--check-safetensors"], {
      encoding: "utf8",
    });
    const digest = (t: HostTensor): string =>
      createHash("sha256")
        .update(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength))
        .digest("hex");
    expect(output).toContain(digest(frozen));
    expect(output).toContain(digest(trained));
    for (const dir of ["..", "a/1", ""]) {
      await rewriteMetadata(join(root, "2"), (m) => ({
        ...m,
        files: (m.files as Record<string, unknown>[]).map((f) => (f.dir === undefined ? f : { ...f, dir })),
      }));
      const run = spawnSync(python, [reader, join(root, "2"), "--json"], { encoding: "utf8" });
      expect(run.status, dir).not.toBe(0);
      expect(run.stderr, dir).toContain("is not one plain path segment");
      await expect(load(join(root, "2"))).rejects.toMatchObject({ code: "corrupt" });
    }
  });
});
