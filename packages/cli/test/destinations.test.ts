import { readFile, readdir, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { type HostTensor, hostTensor, load, openStorage, readMetadata, save } from "@cairn/core";
import { FaultyStorageAdapter } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { layoutEntries, readSafetensorsLayout, writeCheckpoint } from "@cairn/core/ops";
import { cairn, cairnProcess, jsonLines, pattern, tempDir, withStorage } from "./helpers.js";
import { writeSafetensorsSpec } from "./safetensors-reader.js";

function tensor(seed: number, shape = [16, 8]): HostTensor {
  const t = hostTensor("float32", shape);
  new Uint8Array(t.data.buffer).set(pattern(t.data.byteLength, seed));
  return t;
}

async function checkpointAt(dir: string, seed: number): Promise<void> {
  await save({ w: tensor(seed), step: seed }, { checkpointId: dir, blockSize: 256 });
}

async function weightOf(dir: string): Promise<Uint8Array> {
  const state = (await load(dir)) as { w: HostTensor };
  return new Uint8Array(state.w.data.buffer, state.w.data.byteOffset, state.w.data.byteLength);
}

/** Every file under a checkpoint directory with its bytes, to show nothing changed. */
async function snapshot(dir: string): Promise<Map<string, Buffer>> {
  const names = (await readdir(dir)).sort();
  return new Map(await Promise.all(names.map(async (n) => [n, await readFile(join(dir, n))] as const)));
}

describe("a destination inside its source is refused, whatever its spelling", () => {
  it("export into the checkpoint it reads (its metadata.json, the directory itself, via a symlink or ..) is invalid_argument, the source untouched", async () => {
    const dir = await tempDir();
    const ckpt = join(dir, "ckpt");
    await checkpointAt(ckpt, 1);
    await symlink(ckpt, join(dir, "link"));
    const before = await snapshot(ckpt);
    for (const dest of [
      join(ckpt, "metadata.json"),
      ckpt,
      join(dir, "link", "new.safetensors"),
      `${dir}/other/../ckpt/x.safetensors`,
      `file://${ckpt}/sub/x.safetensors`,
    ]) {
      const run = await cairn(["export", ckpt, dest, "--force", "--json"]);
      expect(run.code, dest).toBe(1);
      expect(jsonLines(run)[0]).toMatchObject({ error: { code: "invalid_argument" } });
      expect(run.stderr).toMatch(
        /^cairn export: the destination file:\/\/\S+ (is|lies inside) the source checkpoint file:\/\/\S+ckpt; writing there would damage/,
      );
    }
    expect(await snapshot(ckpt)).toEqual(before);
    expect((await cairn(["verify", ckpt])).code).toBe(0);
  });

  it("cp into its own source or below it is refused; a sibling whose name extends the source's is not inside it", async () => {
    const dir = await tempDir();
    const ckpt = join(dir, "ckpt");
    await checkpointAt(ckpt, 2);
    for (const dest of [ckpt, join(ckpt, "copy")]) {
      const run = await cairn(["cp", ckpt, dest, "--force"]);
      expect(run.code, dest).toBe(1);
      expect(run.stderr).toMatch(/the destination .* (is|lies inside) the source checkpoint/);
    }
    expect((await cairn(["cp", ckpt, `${ckpt}2`])).code).toBe(0);
    expect(await weightOf(`${ckpt}2`)).toEqual(await weightOf(ckpt));
  });

  it("on memory:// the URL paths are compared; import onto its own file is refused", async () => {
    const dir = await tempDir();
    const file = join(dir, "w.safetensors");
    await writeFile(file, writeSafetensorsSpec([{ name: "w", dtype: "F32", shape: [4], bytes: pattern(16) }]));
    const inside = await cairn([
      "import",
      file,
      "memory://d/ckpt",
      "--then",
      "cp",
      "memory://d/ckpt",
      "memory://d//ckpt/./inner",
      "--then",
      "ls",
      "memory://d",
    ]);
    expect(inside.code).toBe(1);
    expect(inside.stderr).toMatch(
      /^cairn cp: the destination memory:\/\/d\/\/ckpt\/inner lies inside the source checkpoint memory:\/\/d\/ckpt;/,
    );
    const own = await cairn(["import", file, file]);
    expect(own.code).toBe(1);
    expect(own.stderr).toMatch(/the destination file:\/\/\S+w\.safetensors is the source file/);
  });
});

describe("nothing that exists is overwritten without --force", () => {
  it("export refuses an existing file (already_exists, the file unchanged); --force replaces it whole", async () => {
    const dir = await tempDir();
    await checkpointAt(join(dir, "ckpt"), 3);
    const out = join(dir, "out.safetensors");
    await writeFile(out, "precious");
    const refused = await cairn(["export", join(dir, "ckpt"), out, "--json"]);
    expect(refused.code).toBe(1);
    expect(jsonLines(refused)[0]).toMatchObject({
      error: {
        code: "already_exists",
        message: expect.stringMatching(/out\.safetensors already exists; choose another name or pass --force/),
      },
    });
    expect(await readFile(out, "utf8")).toBe("precious");
    const forced = await cairn(["export", join(dir, "ckpt"), out, "--force"]);
    expect(forced.code, forced.stderr).toBe(0);
    expect((await readFile(out)).subarray(8, 40).toString()).toMatch(/^\{/);
    expect((await readdir(dir)).sort()).toEqual(["ckpt", "out.safetensors"]);
  });

  it("cp and import onto a committed checkpoint: refused without --force; with it the new one replaces the old, whose data files go", async () => {
    const dir = await tempDir();
    const [src, dst] = [join(dir, "src"), join(dir, "dst")];
    await checkpointAt(src, 4);
    await checkpointAt(dst, 5);
    const oldFiles = Object.keys((await readMetadata(dst)).files);
    const oldWeight = await weightOf(dst);
    const refused = await cairn(["cp", src, dst]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(
      /a checkpoint is already committed at .*dst; choose a new location, delete that one first \(cairn rm\), or pass --force/,
    );
    expect(await weightOf(dst)).toEqual(oldWeight);

    const copied = await cairn(["cp", src, dst, "--force", "--json"]);
    expect(copied.code, copied.stderr).toBe(0);
    expect(jsonLines(copied)[0]).toMatchObject({ leftFiles: [] });
    expect(await weightOf(dst)).toEqual(await weightOf(src));
    const files = Object.keys((await readMetadata(dst)).files);
    expect((await readdir(dst)).sort()).toEqual(["metadata.json", ...files].sort());
    expect(files.some((f) => oldFiles.includes(f))).toBe(false);

    const file = join(dir, "w.safetensors");
    const bytes = pattern(16 * 8 * 4, 9);
    await writeFile(file, writeSafetensorsSpec([{ name: "w", dtype: "F32", shape: [16, 8], bytes }]));
    expect((await cairn(["import", file, dst])).code).toBe(1);
    const imported = await cairn(["import", file, dst, "--force", "--then", "verify", dst]);
    expect(imported.code, imported.stderr).toBe(0);
    expect(await weightOf(dst)).toEqual(bytes);
    expect((await readdir(dst)).filter((f) => f.endsWith(".safetensors"))).toHaveLength(1);
  });

  it("cp --force from a source found damaged mid-copy leaves the old destination whole, byte for byte", async () => {
    const dir = await tempDir();
    const [src, dst] = [join(dir, "src"), join(dir, "dst")];
    await save({ a: tensor(6, [64, 64]), b: tensor(7, [64, 64]) }, { checkpointId: src, blockSize: 1024 });
    await checkpointAt(dst, 8);
    const metadata = await readMetadata(src);
    const chunk = metadata.entries.flatMap((e) => (e.kind === "value" ? [] : e.chunks)).at(-1)!;
    const path = join(src, chunk.file);
    const data = await readFile(path);
    data[chunk.byteOffset + chunk.byteLength - 10]! ^= 0x40;
    await writeFile(path, data);
    const before = await snapshot(dst);
    const run = await cairn(["cp", src, dst, "--force"]);
    expect(run.code).toBe(3);
    expect(run.stderr).toMatch(/is damaged, nothing was copied/);
    expect(await snapshot(dst)).toEqual(before);
    expect((await cairn(["verify", dst])).code).toBe(0);
  });

  it("a write with force that fails at any step (a data file, metadata.json) leaves the old checkpoint readable; a failed cleanup is reported", async () => {
    const url = `memory://force-${process.pid}`;
    await checkpointAt(`${url}/dst`, 10);
    const old = await weightOf(`${url}/dst`);
    await withStorage(url, (storage) =>
      storage.write(
        "w.safetensors",
        writeSafetensorsSpec([{ name: "w", dtype: "F32", shape: [16, 8], bytes: pattern(512, 11) }]),
      ),
    );
    const input = await openStorage(url);
    const entries = layoutEntries(input, await readSafetensorsLayout(input, "w.safetensors", "w"));
    for (const fault of [
      { operation: "write" as const, path: (p: string) => p.endsWith(".safetensors") },
      { operation: "write" as const, path: (p: string) => p.endsWith("metadata.json") },
    ]) {
      await withStorage(`${url}/dst`, async (storage) => {
        const faulty = new FaultyStorageAdapter(storage, [fault]);
        await expect(writeCheckpoint(faulty, "", entries, { force: true })).rejects.toMatchObject({
          message: expect.stringContaining("injected failure"),
        });
        const names: string[] = [];
        for await (const o of storage.list("")) names.push(o.path);
        expect(names.filter((p) => p.endsWith(".safetensors"))).toHaveLength(1);
      });
      expect(await weightOf(`${url}/dst`)).toEqual(old);
    }
    await withStorage(`${url}/dst`, async (storage) => {
      const oldFile = Object.keys((await readMetadata({ storage, path: "" })).files)[0]!;
      const faulty = new FaultyStorageAdapter(storage, [{ operation: "delete", times: 10 }]);
      const result = await writeCheckpoint(faulty, "", entries, { force: true });
      expect(result.leftFiles).toEqual([oldFile]);
    });
    expect(await weightOf(`${url}/dst`)).toEqual(pattern(512, 11));
    await input.close();
  });
});

describe("memory:// results that would vanish with the process", () => {
  it("a write to memory:// as the last command of a run is refused (exit 2, nothing done); followed by --then it runs", async () => {
    const dir = await tempDir();
    const file = join(dir, "w.safetensors");
    await writeFile(file, writeSafetensorsSpec([{ name: "w", dtype: "F32", shape: [4], bytes: pattern(16) }]));
    const alone = await cairnProcess(["import", file, "memory://v/ckpt"]);
    expect([alone.code, alone.stderr]).toEqual([
      2,
      "cairn import: memory://v/ckpt is memory:// storage, which lives only as long as this cairn process: the imported checkpoint would vanish as it exits; use it in the same process with --then (e.g. --then verify memory://v/ckpt); see cairn import --help\n",
    ]);
    const cp = await cairnProcess([
      "import",
      file,
      "memory://v/ckpt",
      "--then",
      "cp",
      "memory://v/ckpt",
      "memory://v/copy",
    ]);
    expect(cp.code).toBe(2);
    expect(cp.stderr).toMatch(
      /^cairn cp: memory:\/\/v\/copy is memory:\/\/ storage, which lives only as long as this cairn process: the copy would vanish/,
    );
    const used = await cairnProcess([
      "import",
      file,
      "memory://v/ckpt",
      "--then",
      "cp",
      "memory://v/ckpt",
      "memory://v/copy",
      "--then",
      "verify",
      "memory://v/copy",
    ]);
    expect(used.code, used.stderr).toBe(0);
  });
});
