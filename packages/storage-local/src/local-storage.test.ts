import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { CheckpointError, openStorage } from "@cairn/core";
import { freshDirs, storageContractSuite } from "@cairn/core/testing";
import { Volume, createFsFromVolume } from "memfs";
import { describe, expect, it } from "vitest";
import { FsStorageAdapter } from "./fs-storage-adapter.js";
import type { FsPromisesLike } from "./fs-like.js";
import { openFileStorageForWorker } from "./local-storage.js";
import "./index.js";

const freshDir = freshDirs("cairn-local-");

let memoryRoots = 0;

storageContractSuite("file://", { open: async () => openStorage(pathToFileURL(await freshDir()).href) });
storageContractSuite("plain path (file://)", {
  open: async () => openStorage(await freshDir()),
  largeObjectBytes: 8 << 20,
});
storageContractSuite("file:// as the upload worker opens it (blocking calls)", {
  open: async () => {
    const storage = await openStorage(pathToFileURL(await freshDir()).href);
    // What a background save's worker thread does with the adapter's portable description.
    const { module, factory, url } = storage.portable!;
    expect({ module, factory }).toEqual({
      module: new URL("./local-storage.ts", import.meta.url).href,
      factory: "openFileStorageForWorker",
    });
    await storage.close();
    return openFileStorageForWorker(new URL(url));
  },
  largeObjectBytes: 8 << 20,
});
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

describe("URLs that name no location", () => {
  it.each([
    ["file:///tmp/a%2Fb", 'an encoded "/" (%2F)'],
    ["file:///tmp/a%2fb", 'an encoded "/" (%2F)'],
    ["file://host/tmp/x", "write file:///host/tmp/x"],
    ["file:///tmp/a%00b", "NUL byte"],
    ["file:///tmp/run?1", 'no query "?1"'],
    ["file:///tmp/run#1", 'no fragment "#1"'],
    ["memory://", "memory://<name>/<path>"],
    ["memory:///a", "memory://<name>/<path>"],
    ["memory://a%2Fb/c", 'decodes to "a/b"'],
    ["memory://a/..%2F..%2Fb", 'decodes to "../../b"'],
    ["memory://%2E%2E/x", 'decodes to ".."'],
    ["memory://a/%zz", "not valid percent-encoding"],
    ["memory://a/b#c", 'no fragment "#c"'],
  ])("refuses %s with invalid_argument naming the URL and what to write", async (url, advice) => {
    const error = (await openStorage(url).catch((e: unknown) => e)) as CheckpointError;
    expect(error).toBeInstanceOf(CheckpointError);
    expect(error.code).toBe("invalid_argument");
    expect(error.message).toMatch(/^\[(file|memory)\] (file|memory):\/\//);
    expect(error.message).toContain(advice);
  });

  it("keeps the TypeError of a URL node cannot turn into a path as the cause", async () => {
    await expect(openStorage("file://host/tmp/x")).rejects.toMatchObject({
      cause: { code: "ERR_INVALID_FILE_URL_HOST" },
    });
    await expect(openStorage("file:///tmp/a%2Fb")).rejects.toMatchObject({
      cause: { code: "ERR_INVALID_FILE_URL_PATH" },
    });
  });

  it("opens the URLs that do name a location, dot segments resolved as URLs resolve them", async () => {
    expect((await openStorage("file://localhost/tmp/x")).root).toBe("file:///tmp/x");
    expect((await openStorage("memory://a/%2e%2e/b")).root).toBe("memory://a/b");
    const spaced = await openStorage("memory://url-ok/with%20space");
    await spaced.write("x", new Uint8Array([1]));
    expect(await (await openStorage("memory://url-ok")).stat("with space/x")).toMatchObject({ size: 1 });
  });
});

describe("file:// writes", () => {
  /** memfs whose file handles record how many writes are in flight, and can fail the nth write. */
  function recordingFs(failWrite?: number): { fs: FsPromisesLike; maxInflight: () => number } {
    const base = createFsFromVolume(new Volume()).promises as unknown as FsPromisesLike;
    let inflight = 0;
    let max = 0;
    let writes = 0;
    const fs: FsPromisesLike = {
      ...base,
      open: async (path, flags, mode) => {
        const handle = await base.open(path, flags, mode);
        return {
          read: (b, o, l, p) => handle.read(b, o, l, p),
          readv: (b, p) => handle.readv(b, p),
          truncate: (length) => handle.truncate(length),
          stat: () => handle.stat(),
          sync: () => handle.sync(),
          close: () => handle.close(),
          write: async (buffer, offset, length, position) => {
            const n = ++writes;
            inflight++;
            max = Math.max(max, inflight);
            try {
              await new Promise((r) => setTimeout(r, 2));
              if (n === failWrite) throw Object.assign(new Error("disk full"), { code: "ENOSPC" });
              return await handle.write(buffer, offset, length, position);
            } finally {
              inflight--;
            }
          },
        };
      },
    };
    return { fs, maxInflight: () => max };
  }

  async function* parts(count: number, size: number): AsyncGenerator<Uint8Array> {
    for (let i = 0; i < count; i++) yield new Uint8Array(size).fill(i);
  }

  it("keeps several writes of a streamed body in flight and places every byte at its position", async () => {
    const { fs, maxInflight } = recordingFs();
    const storage = new FsStorageAdapter("memory", "memory://t", fs, "/t", { syncDirectories: false });
    await storage.write("f", parts(40, 1000));
    const bytes = await storage.read("f");
    expect(bytes.byteLength).toBe(40_000);
    for (let i = 0; i < 40; i++) expect(bytes[i * 1000]).toBe(i);
    expect(maxInflight()).toBeGreaterThan(1);
  });

  it("rejects when one of the writes in flight fails, leaving no object and no temp file", async () => {
    const { fs } = recordingFs(7);
    const storage = new FsStorageAdapter("memory", "memory://t", fs, "/t", { syncDirectories: false });
    await expect(storage.write("f", parts(40, 1000))).rejects.toMatchObject({
      code: "no_space",
      cause: { code: "ENOSPC", message: "disk full" },
    });
    expect(await storage.stat("f")).toBeNull();
    expect(await fs.readdir("/t", { withFileTypes: true })).toEqual([]);
  });
});
