import { appendFile, readFile, readdir, rm, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { type HostTensor, hostTensor, load, readMetadata, save } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { flipByte, rewriteMetadata, sampleTensor, tempDir } from "./helpers.js";

async function savedCheckpoint(): Promise<{ dir: string; file: string; dataOffset: number; headerLength: number }> {
  const dir = join(await tempDir(), "ckpt");
  await save({ model: { w: sampleTensor("float32", [64, 64]) }, step: 3 }, dir);
  const metadata = await readMetadata(dir);
  const entry = metadata.entries.find((e) => e.kind === "tensor");
  if (entry?.kind !== "tensor") throw new Error("the checkpoint has no tensor entry");
  const chunk = entry.chunks[0]!;
  return {
    dir,
    file: chunk.file,
    dataOffset: chunk.byteOffset,
    headerLength: metadata.files[chunk.file]!.headerLength,
  };
}

const target = (): { model: { w: HostTensor } } => ({ model: { w: hostTensor("float32", [64, 64]) } });

describe("damage is detected", () => {
  it("a flipped byte in a data file is corrupt, naming the file and the key", async () => {
    const { dir, file, dataOffset } = await savedCheckpoint();
    await flipByte(join(dir, file), dataOffset + 5000);
    const error = await load(target(), dir).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "corrupt", context: { file, key: "model.w" } });
    expect((error as Error).message).toContain(file);
    expect((error as Error).message).toContain("model.w");
    await expect(load(dir)).rejects.toMatchObject({ code: "corrupt" });
  });

  it("a flipped byte in a data file's safetensors header is corrupt", async () => {
    const { dir, file, headerLength } = await savedCheckpoint();
    await flipByte(join(dir, file), 8 + Math.floor(headerLength / 2));
    await expect(load(target(), dir)).rejects.toMatchObject({
      code: "corrupt",
      message: expect.stringContaining("header"),
    });
  });

  it("a truncated data file is corrupt", async () => {
    const { dir, file, dataOffset } = await savedCheckpoint();
    await truncate(join(dir, file), dataOffset + 100);
    await expect(load(target(), dir)).rejects.toMatchObject({
      code: "corrupt",
      message: expect.stringContaining("truncated"),
    });
  });

  it("an extended or missing data file is corrupt, naming the file: a load checks each file's size", async () => {
    const { dir, file } = await savedCheckpoint();
    await appendFile(join(dir, file), Uint8Array.of(0));
    const error = await load(target(), dir).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: "corrupt",
      context: { file },
      message: expect.stringMatching(/holds \d+ bytes but metadata\.json says \d+: it was truncated or extended/),
    });
    await expect(load(dir)).rejects.toMatchObject({ code: "corrupt" });
    await rm(join(dir, file));
    await expect(load(target(), dir)).rejects.toMatchObject({
      code: "corrupt",
      message: `${file} is missing; the data file is damaged`,
    });
  });

  it("a checkpoint without metadata.json is not_committed; an empty location is not_found", async () => {
    const { dir } = await savedCheckpoint();
    await rm(join(dir, "metadata.json"));
    await expect(load(target(), dir)).rejects.toMatchObject({ code: "not_committed" });
    await expect(readMetadata(dir)).rejects.toMatchObject({ code: "not_committed" });
    await expect(load(target(), join(await tempDir(), "nothing"))).rejects.toMatchObject({ code: "not_found" });
  });

  it("a newer major format version is unsupported_version; a newer minor loads", async () => {
    const { dir } = await savedCheckpoint();
    await rewriteMetadata(dir, (metadata) => ({ ...metadata, version: "2.9", addedLater: { x: 1 } }));
    await load(target(), dir);
    await rewriteMetadata(dir, (metadata) => ({ ...metadata, version: "3.0" }));
    await expect(load(target(), dir)).rejects.toMatchObject({ code: "unsupported_version" });
  });

  it("a changed value in metadata.json is corrupt: the file opens with its own checksum", async () => {
    const { dir } = await savedCheckpoint();
    const path = join(dir, "metadata.json");
    const text = await readFile(path, "utf8");
    expect(text).toMatch(/^\{"metadataCrc32c":\d+,"format":"cairn-checkpoint","version":"2\.\d+",/);
    expect(text).toContain('["v",[0,"step"],3]');
    await writeFile(path, text.replace('["v",[0,"step"],3]', '["v",[0,"step"],4]'));
    const error = await load(dir).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: "corrupt",
      message: expect.stringMatching(/metadata\.json: its bytes do not match their checksum/),
    });
    await expect(load(target(), { checkpointId: dir, partial: true })).rejects.toMatchObject({ code: "corrupt" });
    await expect(readMetadata(dir)).rejects.toMatchObject({ code: "corrupt" });
  });

  it("a metadata.json of format 2.0 without its checksum is corrupt", async () => {
    const { dir } = await savedCheckpoint();
    const path = join(dir, "metadata.json");
    const { metadataCrc32c: _, ...metadata } = JSON.parse(await readFile(path, "utf8")) as Record<string, unknown>;
    await writeFile(path, JSON.stringify(metadata));
    await expect(load(dir)).rejects.toMatchObject({
      code: "corrupt",
      message: expect.stringContaining("must open with its checksum"),
    });
  });

  it("a target the checkpoint cannot fill is a mismatch naming key, expected and found", async () => {
    const { dir } = await savedCheckpoint();
    await expect(load({ model: { w: hostTensor("float32", [64, 65]) } }, dir)).rejects.toMatchObject({
      code: "mismatch",
      message: expect.stringMatching(/model\.w.*float32 tensor of shape \[64,65\].*float32 tensor of shape \[64,64\]/),
    });
    await expect(load({ model: { w: hostTensor("float64", [64, 64]) } }, dir)).rejects.toMatchObject({
      code: "mismatch",
      message: expect.stringContaining("float64"),
    });
    await expect(
      load({ model: { w: hostTensor("float32", [64, 64]), b: hostTensor("float32", [1]) } }, dir),
    ).rejects.toMatchObject({
      code: "mismatch",
      message: expect.stringMatching(/model\.b.*does not have it.*partial: true/),
    });
    await expect(load({ step: Uint8Array.of(1) }, dir)).rejects.toMatchObject({ code: "mismatch" });
  });

  it("partial loads fill what exists and report what was missing", async () => {
    const { dir } = await savedCheckpoint();
    const t = { model: { w: hostTensor("float32", [64, 64]), b: hostTensor("float32", [2], Float32Array.of(5, 6)) } };
    const result = await load(t, { checkpointId: dir, partial: true });
    expect(result.missing).toEqual(["model.b"]);
    expect(t.model.b.data).toEqual(Float32Array.of(5, 6));
    expect(t.model.w.data.some((v) => v !== 0)).toBe(true);
  });

  it("leaves only committed files: data files carry the attempt in their names", async () => {
    const { dir } = await savedCheckpoint();
    const files = (await readdir(dir)).sort();
    expect(files.at(-1)).toBe("metadata.json");
    expect(files.slice(0, -1).every((f) => /^data-r0-\d+-[0-9a-f]{12}\.safetensors$/.test(f))).toBe(true);
  });
});
