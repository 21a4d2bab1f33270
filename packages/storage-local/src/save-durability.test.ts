import { promises as nodeFs } from "node:fs";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, posix } from "node:path";
import { DefaultSavePlanner, type HostTensor, hostTensor, load, readMetadata, save } from "@cairn/core";
import { afterAll, describe, expect, it } from "vitest";
import { FsStorageAdapter } from "./fs-storage-adapter.js";
import type { FileHandleLike, FsPromisesLike } from "./fs-like.js";

const roots: string[] = [];
afterAll(async () => {
  await Promise.all(roots.map((d) => rm(d, { recursive: true, force: true })));
});

/** A file system call that finished, in the order calls finished; `started` is when it began, in the same count. */
interface Done {
  readonly call: "sync" | "rename" | "link";
  /** The file synced, or the new name of a rename or link. */
  readonly path: string;
  readonly from?: string;
  readonly started: number;
}

/** A write to a file, held back (and maybe failed) by `recordingFs`'s `beforeWrite`. */
type BeforeWrite = (path: string) => Promise<void> | undefined;

/**
 * node:fs that records when each fsync, rename and link began and finished, and can fail chosen
 * fsyncs; `beforeWrite` runs before every write to a file and may hold it back or fail it;
 * `onSync` is told when each fsync begins.
 */
function recordingFs(
  failSync?: { errno: string; on: (path: string) => boolean; times: number },
  beforeWrite?: BeforeWrite,
  onSync?: (path: string) => void,
): {
  fs: FsPromisesLike;
  done: Done[];
  /** Every call as it began, as `call path`. */
  begun: string[];
} {
  const base = nodeFs as unknown as FsPromisesLike;
  const done: Done[] = [];
  const begun: string[] = [];
  let clock = 0;
  let failures = 0;
  const timed = async <T>(call: Done["call"], path: string, run: () => Promise<T>, from?: string): Promise<T> => {
    begun.push(`${call} ${path}`);
    const started = clock++;
    const result = await run();
    clock++;
    done.push({ call, path, started, ...(from ? { from } : {}) });
    return result;
  };
  const handleOf = (handle: FileHandleLike, path: string): FileHandleLike => ({
    ...(handle.fd === undefined ? {} : { fd: handle.fd }),
    read: (b, o, l, p) => handle.read(b, o, l, p),
    readv: (b, p) => handle.readv(b, p),
    write: async (b, o, l, p) => {
      await beforeWrite?.(path);
      return handle.write(b, o, l, p);
    },
    truncate: (length) => handle.truncate(length),
    stat: () => handle.stat(),
    close: () => {
      begun.push(`close ${path}`);
      return handle.close();
    },
    sync: () =>
      timed("sync", path, async () => {
        onSync?.(path);
        if (failSync && failures < failSync.times && failSync.on(path)) {
          failures++;
          throw Object.assign(new Error(`${failSync.errno}: injected, fsync '${path}'`), {
            code: failSync.errno,
            syscall: "fsync",
            path,
          });
        }
        await handle.sync();
      }),
  });
  const fs: FsPromisesLike = {
    open: async (path, flags, mode) => handleOf(await base.open(path, flags, mode), path),
    mkdir: (path, options) => base.mkdir(path, options),
    rename: (from, to) => timed("rename", to, () => base.rename(from, to), from),
    link: (existing, created) => timed("link", created, () => base.link(existing, created), existing),
    unlink: (path) => base.unlink(path),
    rmdir: (path) => base.rmdir(path),
    stat: (path) => base.stat(path),
    readdir: (path, options) => base.readdir(path, options),
  };
  return { fs, done, begun };
}

async function storageOn(fs: FsPromisesLike): Promise<{ storage: FsStorageAdapter; root: string }> {
  const root = await mkdtemp(join(tmpdir(), "cairn-durability-"));
  roots.push(root);
  return { storage: new FsStorageAdapter("file", root, fs, root, { syncDirectories: true, directIo: true }), root };
}

function tensor(elements: number, seed: number): HostTensor<"float32"> {
  const t = hostTensor("float32", [elements]);
  for (let i = 0; i < t.data.length; i++) t.data[i] = seed + i;
  return t;
}

/** Four tensors: two small, two of 2 MiB (written with O_DIRECT where the file system takes it). */
function state(): Record<string, HostTensor<"float32">> {
  return { a: tensor(256, 1), b: tensor(512 << 10, 2), c: tensor(1000, 3), d: tensor(512 << 10, 4) };
}

/** In three data files, however small (the durability of each must hold, not only of one). */
const planner = new DefaultSavePlanner({ minFileBytes: 0 });

/**
 * What a crash at any moment may leave must be a committed checkpoint or none: so before
 * metadata.json is linked, every data file's bytes are synced and, after its name was made
 * (rename), its directory is; and the commit's own link is followed by a directory sync before
 * the save returns. Checked on the order in which the file system calls finished.
 */
function expectDurableBeforeCommit(done: readonly Done[], dir: string, dataFiles: readonly string[]): void {
  const link = done.find((d) => d.call === "link" && d.path === posix.join(dir, "metadata.json"));
  expect(link).toBeDefined();
  const before = done.filter((d) => d.started < link!.started);
  /** Every name a file had: a sync of its temp file before the rename synced the same file. */
  const namesOf = (path: string): string[] => [
    path,
    ...done.filter((d) => d.call === "rename" && d.path === path).map((d) => d.from!),
  ];
  for (const name of dataFiles) {
    const path = posix.join(dir, name);
    expect(before.some((d) => d.call === "sync" && namesOf(path).includes(d.path))).toBe(true);
    const renamed = done.find((d) => d.call === "rename" && d.path === path)!;
    expect(renamed.started).toBeLessThan(link!.started);
    expect(before.some((d) => d.call === "sync" && d.path === dir && d.started > renamed.started)).toBe(true);
  }
  expect(before.some((d) => d.call === "sync" && d.path === link!.from)).toBe(true);
  expect(done.some((d) => d.call === "sync" && d.path === dir && d.started > link!.started)).toBe(true);
}

function bytesEqual(a: HostTensor, b: HostTensor): boolean {
  const view = (t: HostTensor): Buffer => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  return view(a).equals(view(b));
}

async function dataFilesOf(storage: FsStorageAdapter, path: string): Promise<string[]> {
  return Object.keys((await readMetadata({ storage, path })).files);
}

describe("a file:// save's durability", () => {
  it("syncs every data file and their directory before the commit, and the directory after it", async () => {
    const { fs, done } = recordingFs();
    const { storage, root } = await storageOn(fs);
    await save(state(), { storage, path: "run/1", concurrency: 3, planner });
    const files = await dataFilesOf(storage, "run/1");
    expect(files).toHaveLength(3);
    expectDurableBeforeCommit(done, posix.join(root, "run/1"), files);
  });

  it("syncs each data file once, on the descriptor it was written through, and their directory once", async () => {
    const { fs, done } = recordingFs();
    const { storage, root } = await storageOn(fs);
    await save(state(), { storage, path: "run/1", concurrency: 3, planner });
    const dir = posix.join(root, "run/1");
    const link = done.find((d) => d.call === "link")!;
    const dirSyncs = done.filter((d) => d.call === "sync" && d.path === dir && d.started < link.started);
    expect(dirSyncs).toHaveLength(1);
    const files = await dataFilesOf(storage, "run/1");
    for (const name of files) {
      const renamed = done.find((d) => d.call === "rename" && d.path === posix.join(dir, name))!;
      // On the descriptor it was written through (opened as its temp name), after its rename: no reopen.
      const syncs = done.filter((d) => d.call === "sync" && (d.path === renamed.from || d.path === renamed.path));
      expect(syncs).toHaveLength(1);
      expect(syncs[0]!.path).toBe(renamed.from);
      expect(syncs[0]!.started).toBeGreaterThan(renamed.started);
      expect(syncs[0]!.started).toBeLessThan(link.started);
    }
  });

  it("starts syncLater writes' fsyncs as sync() is called, on their own descriptors, with no reopen", async () => {
    const { fs, done, begun } = recordingFs();
    const { storage, root } = await storageOn(fs);
    const bytes = new Uint8Array(3 << 20).map((_, i) => i * 7);
    await storage.write("run/a.bin", bytes, { syncLater: true });
    await storage.write("run/b.bin", bytes.subarray(0, 100), { syncLater: true });
    const temp = (name: string): string | undefined =>
      done.find((d) => d.call === "rename" && d.path === posix.join(root, "run", name))?.from;
    expect(begun.filter((call) => call.startsWith("sync "))).toEqual([]);
    // Both fsyncs have begun by the time sync() returns its promise: no open to wait for, nor a turn of this thread.
    const synced = storage.sync!(["run/a.bin", "run/b.bin"]);
    expect(begun).toEqual(expect.arrayContaining([`sync ${temp("a.bin")}`, `sync ${temp("b.bin")}`]));
    await synced;
    // And the root's: "run" is a directory the writes made, whose name the root holds.
    expect(begun.filter((call) => call.startsWith("sync ")).sort()).toEqual(
      [`sync ${temp("a.bin")}`, `sync ${temp("b.bin")}`, `sync ${posix.join(root, "run")}`, `sync ${root}`].sort(),
    );
    expect(Buffer.from(await storage.read("run/a.bin")).equals(Buffer.from(bytes))).toBe(true);
  });

  it("reports a syncLater write's failed fsync from sync(), and closes the descriptor of one deleted unsynced", async () => {
    const { fs, done, begun } = recordingFs({ errno: "EIO", on: (p) => p.includes(".cairn-tmp-"), times: 1 });
    const { storage, root } = await storageOn(fs);
    await storage.write("run/a.bin", new Uint8Array(100), { syncLater: true });
    await expect(storage.sync!(["run/a.bin"])).rejects.toMatchObject({ code: "storage", transient: true });
    await storage.write("run/b.bin", new Uint8Array(100), { syncLater: true });
    const temp = done.find((d) => d.call === "rename" && d.path === posix.join(root, "run/b.bin"))!.from!;
    expect(begun).not.toContain(`close ${temp}`);
    await storage.delete("run/b.bin");
    expect(begun).toContain(`close ${temp}`);
    // A later object there is synced on its own (reopened), not through the closed descriptor.
    await storage.write("run/b.bin", new Uint8Array(100), { syncLater: false });
    await storage.sync!(["run/b.bin"]);
    expect(begun.filter((call) => call === `sync ${posix.join(root, "run/b.bin")}`)).toHaveLength(1);
  });

  it("writes the data files anew, each durable, when their joint sync fails once with EIO, and commits", async () => {
    const { fs, done } = recordingFs({ errno: "EIO", on: (p) => p.includes("data-r"), times: 1 });
    const { storage, root } = await storageOn(fs);
    const saved = state();
    await save(saved, { storage, path: "run/1", concurrency: 3, planner });
    expectDurableBeforeCommit(done, posix.join(root, "run/1"), await dataFilesOf(storage, "run/1"));
    const loaded = (await load({ storage, path: "run/1" })) as Record<string, HostTensor<"float32">>;
    for (const key of Object.keys(saved)) expect(bytesEqual(loaded[key]!, saved[key]!)).toBe(true);
    expect((await readdir(join(root, "run/1"))).filter((n) => n.startsWith(".cairn-tmp-"))).toEqual([]);
  });

  it("commits nothing and leaves no data file when their sync fails for good (ENOSPC)", async () => {
    const { fs } = recordingFs({ errno: "ENOSPC", on: (p) => p.includes("data-r"), times: Infinity });
    const { storage, root } = await storageOn(fs);
    await expect(save(state(), { storage, path: "run/1", concurrency: 3, planner })).rejects.toMatchObject({
      code: "no_space",
    });
    expect(await readdir(join(root, "run/1")).catch(() => [])).toEqual([]);
  });

  describe("with metadata.json prepared while the data files are written", () => {
    const isData = (path: string): boolean => posix.basename(path).startsWith(".cairn-tmp-data-r");
    const isMetadata = (path: string): boolean => posix.basename(path).startsWith(".cairn-tmp-metadata.json");
    /**
     * Data files' writes held until metadata.json's temp file is being synced (or 3 s passed:
     * a save that made its metadata only after its data files then shows it in the order of calls).
     */
    function holdingData(fail?: (path: string) => Error | undefined): {
      beforeWrite: BeforeWrite;
      onSync: (path: string) => void;
    } {
      let metadataSynced!: () => void;
      const synced = new Promise<void>((resolve) => (metadataSynced = resolve));
      const timeout = new Promise<void>((resolve) => setTimeout(resolve, 3000).unref());
      return {
        beforeWrite: async (path) => {
          if (!isData(path)) return;
          await Promise.race([synced, timeout]);
          const error = fail?.(path);
          if (error) throw error;
        },
        onSync: (path) => {
          if (isMetadata(path)) metadataSynced();
        },
      };
    }
    const injected = (errno: string, path: string): Error =>
      Object.assign(new Error(`${errno}: injected, write '${path}'`), { code: errno, syscall: "write", path });

    it("writes and syncs metadata.json while the data files are still being written, then commits", async () => {
      const hold = holdingData();
      const { fs, done } = recordingFs(undefined, hold.beforeWrite, hold.onSync);
      const { storage, root } = await storageOn(fs);
      const saved = state();
      await save(saved, { storage, path: "run/1", concurrency: 3, planner });
      const dir = posix.join(root, "run/1");
      const files = await dataFilesOf(storage, "run/1");
      expectDurableBeforeCommit(done, dir, files);
      const metadataSync = done.find((d) => d.call === "sync" && isMetadata(d.path))!;
      for (const name of files) {
        const renamed = done.find((d) => d.call === "rename" && d.path === posix.join(dir, name))!;
        expect(metadataSync.started).toBeLessThan(renamed.started);
      }
      const loaded = (await load({ storage, path: "run/1" })) as Record<string, HostTensor<"float32">>;
      for (const key of Object.keys(saved)) expect(bytesEqual(loaded[key]!, saved[key]!)).toBe(true);
    });

    it("commits nothing and leaves no file when a data file's write then fails for good (ENOSPC)", async () => {
      const hold = holdingData((path) => injected("ENOSPC", path));
      const { fs } = recordingFs(undefined, hold.beforeWrite, hold.onSync);
      const { storage, root } = await storageOn(fs);
      const saving = save(state(), { storage, path: "run/1", concurrency: 3, planner });
      await expect(saving).rejects.toMatchObject({ code: "no_space", message: /nothing was committed/ });
      await expect(saving).rejects.toHaveProperty("cause.cause.code", "ENOSPC");
      expect(await readdir(join(root, "run/1")).catch(() => [])).toEqual([]);
    });

    it("says the save was cancelled, commits nothing and leaves no file when aborted during a data write", async () => {
      const controller = new AbortController();
      const hold = holdingData(() => {
        controller.abort();
        return undefined;
      });
      const { fs } = recordingFs(undefined, hold.beforeWrite, hold.onSync);
      const { storage, root } = await storageOn(fs);
      await expect(
        save(state(), { storage, path: "run/1", concurrency: 3, planner, signal: controller.signal }),
      ).rejects.toMatchObject({ code: "cancelled" });
      expect(await readdir(join(root, "run/1")).catch(() => [])).toEqual([]);
    });

    it("writes a data file again after a transient failure (EIO), and commits the same checksums", async () => {
      let failures = 0;
      const hold = holdingData((path) => (failures++ === 0 ? injected("EIO", path) : undefined));
      const { fs } = recordingFs(undefined, hold.beforeWrite, hold.onSync);
      const { storage, root } = await storageOn(fs);
      const saved = state();
      await save(saved, { storage, path: "run/1", concurrency: 3, planner, retry: { baseDelayMs: 1 } });
      expect(failures).toBeGreaterThan(1);
      const loaded = (await load({ storage, path: "run/1" })) as Record<string, HostTensor<"float32">>;
      for (const key of Object.keys(saved)) expect(bytesEqual(loaded[key]!, saved[key]!)).toBe(true);
      expect((await readdir(join(root, "run/1"))).filter((n) => n.startsWith(".cairn-tmp-"))).toEqual([]);
    });

    it("refuses the save when the state changed before a data file was written again", async () => {
      const saved = state();
      let failures = 0;
      const hold = holdingData((path) => {
        if (failures++ > 0) return undefined;
        // Every tensor changed after its checksums went into metadata.json: the second write hashes other bytes.
        for (const t of Object.values(saved)) t.data[0]! += 1;
        return injected("EIO", path);
      });
      const { fs } = recordingFs(undefined, hold.beforeWrite, hold.onSync);
      const { storage, root } = await storageOn(fs);
      await expect(
        save(saved, { storage, path: "run/1", concurrency: 3, planner, retry: { baseDelayMs: 1 } }),
      ).rejects.toMatchObject({ code: "invalid_argument", message: /changed while it was being saved/ });
      expect(await readdir(join(root, "run/1")).catch(() => [])).toEqual([]);
    });
  });
});
