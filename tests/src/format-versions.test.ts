import { cp, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type HostTensor, hostTensor, load, openStorage, readMetadata, save } from "@cairn/core";
import { copyCheckpoint } from "@cairn/core/ops";
import { describe, expect, it } from "vitest";
import { rewriteMetadata, tempDir } from "./helpers.js";

/** A checkpoint written by Cairn 0.x with format 1.1 (long field names, one block size of 16 bytes), kept as it was written. */
const STORED_1_1 = fileURLToPath(new URL("../fixtures/checkpoint-1.1", import.meta.url));

const expected = {
  model: {
    layers: [
      { w: { dtype: "float32", shape: [4, 3], data: Float32Array.from({ length: 12 }, (_, i) => i * 0.5 - 1) } },
      { w: { dtype: "int32", shape: [6], data: Int32Array.of(1, -2, 3, -4, 5, -6) } },
    ],
  },
  rng: Uint8Array.of(9, 8, 7),
  step: 7,
  best: NaN,
  empty: {},
};

describe("format versions", () => {
  it("reads a stored 1.1 checkpoint: every entry, every block verified, into a target too", async () => {
    expect((await readMetadata(STORED_1_1)).version).toBe("1.1");
    expect(await load(STORED_1_1)).toEqual(expected);
    const w = hostTensor("float32", [4, 3]);
    const result = await load({ model: { layers: [{ w }] } }, { checkpointId: STORED_1_1, partial: true });
    expect(result.entries).toBe(1);
    expect(w.data).toEqual(expected.model.layers[0]!.w.data);
  });

  it("reads a 1.0 checkpoint without its checksum, finds a damaged block of a 1.1 one", async () => {
    const dir = join(await tempDir(), "old");
    await cp(STORED_1_1, dir, { recursive: true });
    const path = join(dir, "metadata.json");
    const { metadataCrc32c: _, ...metadata } = JSON.parse(await readFile(path, "utf8")) as Record<string, unknown>;
    await writeFile(path, JSON.stringify({ ...metadata, version: "1.0" }));
    expect(await load(dir)).toEqual(expected);
    await writeFile(path, JSON.stringify(metadata));
    await expect(load(dir)).rejects.toMatchObject({
      code: "corrupt",
      message: expect.stringContaining("must open with its checksum"),
    });

    const damaged = join(await tempDir(), "damaged");
    await cp(STORED_1_1, damaged, { recursive: true });
    const file = Object.keys((await readMetadata(damaged)).files)[0]!;
    const bytes = await readFile(join(damaged, file));
    bytes[bytes.byteLength - 1]! ^= 1;
    await writeFile(join(damaged, file), bytes);
    await expect(load(damaged)).rejects.toMatchObject({
      code: "corrupt",
      message: expect.stringContaining("checksum mismatch"),
    });
  });

  it("copies a stored 1.1 checkpoint into a 2.0 one holding the same bytes", async () => {
    const to = join(await tempDir(), "copy");
    const source = await openStorage(`file://${STORED_1_1}`);
    const destination = await openStorage(`file://${to}`);
    try {
      await copyCheckpoint(
        { storage: source, dir: "", metadata: await readMetadata(STORED_1_1), where: STORED_1_1 },
        { storage: destination, dir: "", where: to },
      );
    } finally {
      await source.close();
      await destination.close();
    }
    expect((await readMetadata(to)).version).toBe("2.0");
    expect(await load(to)).toEqual(expected);
  });

  it("writes 2.1 only for a step that references a sibling's files; a dir that is not a plain name is corrupt, an unknown file field unsupported", async () => {
    const root = await tempDir();
    const w = hostTensor("float32", [64]) as HostTensor;
    await save({ w, v: hostTensor("float32", [2]) }, join(root, "1"));
    await save({ w, v: hostTensor("float32", [2]) }, join(root, "2"));
    expect((await readMetadata(join(root, "2"))).version).toBe("2.0");
    await save(
      { w, v: Object.assign(hostTensor("float32", [2]), { data: Float32Array.of(1, 2) }) },
      { checkpointId: join(root, "3"), incremental: { base: "1" } },
    );
    const text = await readFile(join(root, "3", "metadata.json"), "utf8");
    expect(text).toMatch(/^\{"metadataCrc32c":\d+,"format":"cairn-checkpoint","version":"2\.1",/);
    expect(text).toContain('"dir":"1"');
    for (const dir of ["..", ".", "", "a/b", "a\\b", "a\u0000", 5, "__proto__"]) {
      const copy = join(await tempDir(), "3");
      await cp(join(root, "3"), copy, { recursive: true });
      await rewriteMetadata(copy, (m) => ({
        ...m,
        files: (m.files as Record<string, unknown>[]).map((f) => (f.dir === undefined ? f : { ...f, dir })),
      }));
      await expect(readMetadata(copy), JSON.stringify(dir)).rejects.toMatchObject({
        code: "corrupt",
        message: expect.stringContaining("not the plain name of a sibling"),
      });
    }
    await rewriteMetadata(join(root, "3"), (m) => ({
      ...m,
      files: (m.files as Record<string, unknown>[]).map((f) => ({ ...f, location: "elsewhere" })),
    }));
    await expect(readMetadata(join(root, "3"))).rejects.toMatchObject({
      code: "unsupported_version",
      message: expect.stringMatching(/has the field "location".*upgrade @cairn\/core/),
    });
  });

  it("writes 2.0, which a 1.x reader refuses as a newer major version", async () => {
    const dir = join(await tempDir(), "new");
    await save({ w: hostTensor("float32", [2]) as HostTensor }, dir);
    const text = await readFile(join(dir, "metadata.json"), "utf8");
    expect(text).toMatch(/^\{"metadataCrc32c":\d+,"format":"cairn-checkpoint","version":"2\.0",/);
    expect((await readMetadata(dir)).version).toBe("2.0");
  });
});
