import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { openStorage } from "@cairn/core";
import { storageContractSuite } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";
import "./index.js";

const roots: string[] = [];
async function freshDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "cairn-local-"));
  roots.push(dir);
  return dir;
}
afterAll(async () => {
  await Promise.all(roots.map((d) => rm(d, { recursive: true, force: true })));
});

let memoryRoots = 0;

storageContractSuite("file://", { open: async () => openStorage(pathToFileURL(await freshDir()).href) });
storageContractSuite("plain path (file://)", { open: async () => openStorage(await freshDir()), largeObjectBytes: 8 << 20 });
storageContractSuite("memory://", { open: () => openStorage(`memory://contract-${memoryRoots++}/root`) });

describe("file:// specifics", () => {
  it("leaves no temp files behind and removes directories a delete empties", async () => {
    const dir = await freshDir();
    const storage = await openStorage(dir);
    await storage.write("step/100/data.bin", new Uint8Array([1, 2, 3]));
    await storage.write("step/100/meta", new Uint8Array([4]), { ifAbsent: true });
    expect((await readdir(join(dir, "step/100"))).sort()).toEqual(["data.bin", "meta"]);
    await storage.delete("step/100/data.bin");
    await storage.delete("step/100/meta");
    expect(await readdir(dir)).toEqual([]);
  });

  it("keeps memory:// locations apart by URL", async () => {
    const a = await openStorage("memory://apart/a");
    const b = await openStorage("memory://apart/b");
    await a.write("x", new Uint8Array([1]));
    expect(await b.stat("x")).toBeNull();
    expect(await (await openStorage("memory://apart")).stat("a/x")).toMatchObject({ size: 1 });
  });
});
