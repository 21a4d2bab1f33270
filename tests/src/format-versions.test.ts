import { cp, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type HostTensor, hostTensor, load, openStorage, readMetadata, save } from "@cairn/core";
import { checkpointFingerprint, hasContentHashes } from "@cairn/core/format";
import { copyCheckpoint } from "@cairn/core/ops";
import { describe, expect, it } from "vitest";
import { rewriteMetadata, tempDir } from "./helpers.js";

/** A checkpoint written by Cairn 0.x with format 1.1 (long field names, one block size of 16 bytes), kept as it was written. */
const STORED_1_1 = fileURLToPath(new URL("../fixtures/checkpoint-1.1", import.meta.url));
/** Steps 1 (2.0, full) and 2 (2.1, referencing 1's file of `frozen`) written before content hashes, kept as written. */
const STORED_2_1 = fileURLToPath(new URL("../fixtures/incremental-2.1", import.meta.url));

/** The state the 2.1 fixture's step `step` holds (and what later steps of these tests save). */
function storedState(step: number) {
  return {
    model: {
      frozen: hostTensor(
        "float32",
        [64, 32],
        Float32Array.from({ length: 2048 }, (_, i) => i * 0.25),
      ),
      trained: hostTensor(
        "float32",
        [8],
        Float32Array.from({ length: 8 }, (_, i) => step + i),
      ),
    },
    rng: Uint8Array.of(step, 2, 3),
    step,
  };
}

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
    // The metadata readMetadata gave, handed back: a 1.x checkpoint's is checked and used as read.
    expect(await load({ checkpointId: STORED_1_1, metadata: await readMetadata(STORED_1_1) })).toEqual(expected);
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

  it("writes 2.2, every chunk's content hash in contentHashes; a dir that is not a plain name is corrupt, an unknown file field unsupported", async () => {
    const root = await tempDir();
    const w = hostTensor("float32", [64]) as HostTensor;
    await save({ w, v: hostTensor("float32", [2]) }, join(root, "1"));
    await save({ w, v: hostTensor("float32", [2]) }, join(root, "2"));
    const full = await readMetadata(join(root, "2"));
    expect(full.version).toBe("2.2");
    expect(Object.values(full.files).every((f) => f.dir === undefined)).toBe(true);
    await save(
      { w, v: Object.assign(hostTensor("float32", [2]), { data: Float32Array.of(1, 2) }) },
      { checkpointId: join(root, "3"), incremental: { base: "1" } },
    );
    const text = await readFile(join(root, "3", "metadata.json"), "utf8");
    expect(text).toMatch(/^\{"metadataCrc32c":\d+,"format":"cairn-checkpoint","version":"2\.2",/);
    expect(text).toContain('"dir":"1"');
    expect(text).toMatch(/"contentHashes":\{"algorithm":"xxh3-128","chunks":"[A-Za-z0-9+/]{43}="\}\}$/);
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

  it("writes 2.x, which a 1.x reader refuses as a newer major version; reads a newer minor, ignoring its new fields", async () => {
    const dir = join(await tempDir(), "new");
    await save({ w: hostTensor("float32", [2]) as HostTensor, step: 1 }, dir);
    const text = await readFile(join(dir, "metadata.json"), "utf8");
    expect(text).toMatch(/^\{"metadataCrc32c":\d+,"format":"cairn-checkpoint","version":"2\.2",/);
    // What a 2.0 or 2.1 reader does with 2.2's contentHashes: ignore a top-level field it does not know.
    await rewriteMetadata(dir, (m) => ({ ...m, version: "2.9", laterField: { anything: [1, 2] } }));
    expect((await readMetadata(dir)).version).toBe("2.9");
    expect(await load(dir)).toEqual({ w: hostTensor("float32", [2]), step: 1 });
  });

  it("reads stored 2.0 and 2.1 steps without content hashes; one serves as a base by a full write, the next save is incremental again", async () => {
    const root = await tempDir();
    await cp(STORED_2_1, root, { recursive: true });
    for (const step of [1, 2]) {
      const metadata = await readMetadata(join(root, String(step)));
      expect(metadata.version).toBe(step === 1 ? "2.0" : "2.1");
      expect(hasContentHashes(metadata.entries)).toBe(false);
      expect(await checkpointFingerprint(metadata)).toBeUndefined();
      expect(await load(join(root, String(step)))).toEqual(storedState(step));
    }
    // A base without hashes has nothing to compare with: every chunk is written, with its hash.
    const three = await save(storedState(3), { checkpointId: join(root, "3"), incremental: { base: "2" } });
    expect(three.referenced).toBeUndefined();
    const metadata3 = await readMetadata(join(root, "3"));
    expect(metadata3.version).toBe("2.2");
    expect(hasContentHashes(metadata3.entries)).toBe(true);
    expect(Object.values(metadata3.files).every((f) => f.dir === undefined)).toBe(true);
    expect(await load(join(root, "3"))).toEqual(storedState(3));
    // The step after it references its unchanged chunks (frozen), as incremental saves do.
    const four = await save(storedState(4), { checkpointId: join(root, "4"), incremental: { base: "3" } });
    expect(four.referenced).toHaveLength(1);
    expect(four.referenced![0]).toMatch(/^3\//);
    expect(await load(join(root, "4"))).toEqual(storedState(4));
    expect(await load(join(root, "2"))).toEqual(storedState(2));
  });

  it("reads contentHashes only as 16 bytes per chunk of a known algorithm: another algorithm is ignored, anything else is corrupt", async () => {
    const dir = join(await tempDir(), "hashed");
    await save(storedState(5), dir);
    const metadata = await readMetadata(dir);
    expect(await checkpointFingerprint(metadata)).toMatch(/^[0-9a-f]{32}$/);
    const original = await readFile(join(dir, "metadata.json"), "utf8");
    const table = (JSON.parse(original) as { contentHashes: { chunks: string } }).contentHashes.chunks;
    const cases: [unknown, string | undefined][] = [
      [{ algorithm: "blake3-256", chunks: "whatever" }, undefined],
      [{ algorithm: "xxh3-128", chunks: table.slice(0, -4) }, "16-byte hashes"],
      [{ algorithm: "xxh3-128", chunks: Buffer.alloc(16 * 5).toString("base64") }, "5 hashes for 3 chunks"],
      [{ algorithm: "xxh3-128", chunks: Buffer.alloc(16).toString("base64") }, "fewer hashes"],
      [{ algorithm: "xxh3-128", chunks: `${table.slice(0, -4)}!!!=` }, "not base64"],
      [{ algorithm: "xxh3-128" }, "two strings"],
      ["xxh3-128", "two strings"],
    ];
    for (const [contentHashes, problem] of cases) {
      await writeFile(join(dir, "metadata.json"), original);
      await rewriteMetadata(dir, (m) => ({ ...m, contentHashes }));
      if (problem === undefined) {
        const read = await readMetadata(dir);
        expect(hasContentHashes(read.entries)).toBe(false);
        expect(await load(dir)).toEqual(storedState(5));
      } else {
        await expect(readMetadata(dir), JSON.stringify(contentHashes)).rejects.toMatchObject({
          code: "corrupt",
          message: expect.stringContaining(problem),
        });
      }
    }
  });
});
