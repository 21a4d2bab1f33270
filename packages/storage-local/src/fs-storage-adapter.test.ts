import { promises as nodeFs } from "node:fs";
import { readFile, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CheckpointError, type CheckpointErrorCode, type StorageAdapter, openStorage } from "@cairn/core";
import { type FaultyOperation, FaultyStorageAdapter, freshDirs } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { DIRECT_MIN_BYTES, FsStorageAdapter } from "./fs-storage-adapter.js";
import type { FileHandleLike, FsPromisesLike } from "./fs-like.js";
import "./index.js";

const freshDir = freshDirs("cairn-faults-");

/** A file system call the adapter makes; handle calls are named after the handle's method. */
type FsCall =
  "open" | "mkdir" | "rename" | "link" | "unlink" | "stat" | "readdir" | "handle.read" | "handle.write" | "handle.sync";

interface Injection {
  readonly call: FsCall;
  readonly errno: string;
  /** Only calls about paths this accepts fail (default: all). */
  readonly on?: (path: string) => boolean;
  /** How many of those calls fail (default: every one). */
  readonly times?: number;
}

const isTemp = (path: string): boolean => path.includes(".cairn-tmp-");

/** node:fs whose chosen call fails with an errno-style error, as the kernel would report it; `thrown` holds what it threw. */
function failingFs(injection: Injection): { fs: FsPromisesLike; thrown: Error[] } {
  const base = nodeFs as unknown as FsPromisesLike;
  const thrown: Error[] = [];
  const fail = (call: FsCall, path: string): void => {
    if (
      call !== injection.call ||
      (injection.on && !injection.on(path)) ||
      thrown.length >= (injection.times ?? Infinity)
    )
      return;
    const error = Object.assign(new Error(`${injection.errno}: injected, ${call} '${path}'`), {
      code: injection.errno,
      syscall: call,
      path,
    });
    thrown.push(error);
    throw error;
  };
  const handleOf = (handle: FileHandleLike, path: string): FileHandleLike => ({
    read: async (b, o, l, p) => (fail("handle.read", path), handle.read(b, o, l, p)),
    readv: async (b, p) => (fail("handle.read", path), handle.readv(b, p)),
    write: async (b, o, l, p) => (fail("handle.write", path), handle.write(b, o, l, p)),
    sync: async () => (fail("handle.sync", path), handle.sync()),
    truncate: (length) => handle.truncate(length),
    stat: () => handle.stat(),
    close: () => handle.close(),
  });
  const fs: FsPromisesLike = {
    open: async (path, flags, mode) => (fail("open", path), handleOf(await base.open(path, flags, mode), path)),
    mkdir: async (path, options) => (fail("mkdir", path), base.mkdir(path, options)),
    rename: async (from, to) => (fail("rename", to), base.rename(from, to)),
    link: async (existing, created) => (fail("link", created), base.link(existing, created)),
    unlink: async (path) => (fail("unlink", path), base.unlink(path)),
    rmdir: (path) => base.rmdir(path),
    stat: async (path) => (fail("stat", path), base.stat(path)),
    readdir: async (path, options) => (fail("readdir", path), base.readdir(path, options)),
  };
  return { fs, thrown };
}

/** Every file under `dir`, relative to it. */
async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(dir.length + 1))
    .sort();
}

async function drain(storage: StorageAdapter, prefix: string): Promise<void> {
  for await (const _ of storage.list(prefix));
}

const OLD = new Uint8Array([1, 2, 3]);
const NEW = new Uint8Array(64).fill(7);
const BIG = new Uint8Array(DIRECT_MIN_BYTES + 4096).fill(9);

/**
 * Each place an operation calls the file system. `object` exists before the call (with OLD) when
 * `existing`; `placed` says the failure comes after the new object was put in place (the
 * directory fsync), so it is there, whole.
 */
const SITES: readonly {
  readonly name: string;
  readonly operation: FaultyOperation;
  readonly call: FsCall;
  readonly on?: (path: string) => boolean;
  readonly existing?: boolean;
  readonly ifAbsent?: boolean;
  readonly body?: Uint8Array;
  readonly placed?: boolean;
}[] = [
  { name: "read: stat", operation: "read", call: "stat", existing: true },
  { name: "read: open", operation: "read", call: "open", existing: true },
  { name: "read: read", operation: "read", call: "handle.read", existing: true },
  { name: "write: mkdir", operation: "write", call: "mkdir" },
  { name: "write: create the temp file", operation: "write", call: "open", on: isTemp },
  { name: "write: write", operation: "write", call: "handle.write" },
  { name: "write: fsync", operation: "write", call: "handle.sync", on: isTemp },
  { name: "write: rename over the old object", operation: "write", call: "rename", existing: true },
  { name: "write ifAbsent: link", operation: "write", call: "link", ifAbsent: true },
  {
    name: "write: open the directory to fsync it",
    operation: "write",
    call: "open",
    on: (p) => !isTemp(p),
    placed: true,
  },
  { name: "direct write: create the temp file", operation: "write", call: "open", on: isTemp, body: BIG },
  { name: "direct write: write", operation: "write", call: "handle.write", body: BIG },
  { name: "stat", operation: "stat", call: "stat", existing: true },
  { name: "list", operation: "list", call: "readdir", existing: true },
  { name: "delete", operation: "delete", call: "unlink", existing: true },
];

const ERRNOS: readonly { errno: string; code: CheckpointErrorCode; transient?: boolean }[] = [
  { errno: "EROFS", code: "permission_denied" },
  { errno: "EACCES", code: "permission_denied" },
  { errno: "EPERM", code: "permission_denied" },
  { errno: "ENOSPC", code: "no_space" },
  { errno: "EDQUOT", code: "no_space" },
  { errno: "EMFILE", code: "storage", transient: true },
  { errno: "EIO", code: "storage", transient: true },
];

async function attempt(storage: StorageAdapter, site: (typeof SITES)[number]): Promise<unknown> {
  const path = "run/obj";
  switch (site.operation) {
    case "read":
      return storage.read(path);
    case "write":
      return storage.write(path, site.body ?? NEW, { ifAbsent: site.ifAbsent ?? false });
    case "stat":
      return storage.stat(path);
    case "list":
      return drain(storage, "run/");
    case "delete":
      return storage.delete(path);
  }
}

describe("file:// failures keep their cause and get the right code", () => {
  const cases = SITES.flatMap((site) => ERRNOS.map((e) => ({ ...e, site })));
  it.each(cases)("$site.name fails with $errno → $code", async ({ site, errno, code, transient }) => {
    const dir = await freshDir();
    if (site.existing) {
      await nodeFs.mkdir(join(dir, "run"));
      await writeFile(join(dir, "run/obj"), OLD);
    }
    const { fs, thrown } = failingFs({ call: site.call, errno, ...(site.on ? { on: site.on } : {}) });
    const storage = new FsStorageAdapter("file", dir, fs, dir, { syncDirectories: true, directIo: true });

    const error = await attempt(storage, site).then(
      () => undefined,
      (e: unknown) => e,
    );

    expect(thrown.length).toBeGreaterThan(0);
    expect(error).toBeInstanceOf(CheckpointError);
    expect(error).toMatchObject({
      code,
      context: { path: site.operation === "list" ? "run" : "run/obj", protocol: "file" },
    });
    expect((error as CheckpointError).cause).toBe(thrown[0]);
    expect((error as CheckpointError).transient).toBe(transient ?? false);
    expect((error as Error).message).toMatch(
      new RegExp(`^\\[file\\] ${dir}/run(/obj)?: cannot ${site.operation}: .* \\(${errno}\\); \\w`),
    );
    // Nothing partial: the old object (or none), or the new one whole once it was in place; never a temp file.
    const expected = site.placed ? (site.body ?? NEW) : site.existing ? OLD : undefined;
    expect(await filesUnder(dir)).toEqual(expected ? ["run/obj"] : []);
    if (expected) expect(new Uint8Array(await readFile(join(dir, "run/obj")))).toEqual(expected);
  });
});

describe("file:// directories a write cannot make", () => {
  it.each(ERRNOS.filter((e) => !e.transient))(
    "are reported with the real errno ($errno → $code), not the ENOENT of node's recursive mkdir",
    async ({ errno, code }) => {
      const dir = await freshDir();
      const base = nodeFs as unknown as FsPromisesLike;
      const refused = (path: string, name: string): Error =>
        Object.assign(new Error(`${name}: injected, mkdir '${path}'`), { code: name, syscall: "mkdir", path });
      // As node's recursive mkdir on a read-only mount: it stats the directory it failed to make and reports that stat's ENOENT.
      const fs: FsPromisesLike = {
        ...base,
        mkdir: async (path, options) => {
          if (await base.stat(path).catch(() => undefined)) return base.mkdir(path, options);
          throw refused(path, options?.recursive ? "ENOENT" : errno);
        },
      };
      const storage = new FsStorageAdapter("file", dir, fs, dir, { syncDirectories: true });
      const error = (await storage.write("run/1/obj", NEW).catch((e: unknown) => e)) as CheckpointError;
      expect(error).toMatchObject({ code, cause: { code: errno, path: join(dir, "run") } });
      expect(error.transient).toBe(false);
      expect(await filesUnder(dir)).toEqual([]);
    },
  );
});

describe("file:// failures on a real file system", () => {
  it("reports a directory the process may not write in as permission_denied, never not_found", async () => {
    // sysfs refuses new files and directories even to root (EPERM, EACCES; EROFS where mounted read-only).
    for (const [root, path] of [
      ["/sys/cairn-no-such-dir", "step/1/x"],
      ["/sys/fs", "cairn-probe"],
    ] as const) {
      const storage = await openStorage(root);
      const error = (await storage.write(path, NEW).catch((e: unknown) => e)) as CheckpointError;
      expect(error).toMatchObject({
        code: "permission_denied",
        message: expect.stringMatching(/^\[file\] \/sys\/.*: cannot write: .*\(E(PERM|ACCES|ROFS)\); /),
      });
      expect(["EPERM", "EACCES", "EROFS"]).toContain((error.cause as NodeJS.ErrnoException).code);
      await expect(storage.read(path)).rejects.toMatchObject({ code: "not_found", cause: { code: "ENOENT" } });
    }
  });

  it("tells a file in the way of a directory apart from a missing object", async () => {
    const dir = await freshDir();
    const storage = await openStorage(dir);
    await storage.write("f", OLD);
    await expect(storage.read("f/x")).rejects.toMatchObject({ code: "not_found", cause: { code: "ENOTDIR" } });
    expect(await storage.stat("f/x")).toBeNull();
    await storage.delete("f/x");
    const error = (await storage.write("f/x/y", NEW).catch((e: unknown) => e)) as CheckpointError;
    expect(error).toMatchObject({
      code: "storage",
      message: expect.stringContaining("a parent of it is a file"),
      cause: { code: "ENOTDIR" },
    });
    expect(error.transient).toBe(false);
    expect(await filesUnder(dir)).toEqual(["f"]);

    const onFile = await openStorage(join(dir, "f"));
    await expect(onFile.read("x")).rejects.toMatchObject({ code: "not_found", cause: { code: "ENOTDIR" } });
    // mkdir(2) of the root finds the file.
    await expect(onFile.write("x", NEW)).rejects.toMatchObject({
      code: "storage",
      message: expect.stringContaining("a parent of it is a file"),
      cause: { code: "EEXIST" },
    });
  });

  let memoryRoots = 0;
  it.each([
    ["file", freshDir],
    ["memory", async () => `memory://faults-dir/${memoryRoots++}`],
  ] as const)(
    "%s:// refuses to replace a directory with an object, and reports an atomic create onto one as already_exists",
    async (_, root) => {
      const storage = await openStorage(await root());
      await storage.write("d/x", OLD);
      await expect(storage.write("d", NEW)).rejects.toMatchObject({
        code: "storage",
        message: expect.stringContaining("is a directory"),
        cause: { code: "EISDIR" },
      });
      await expect(storage.write("d", NEW, { ifAbsent: true })).rejects.toMatchObject({
        code: "already_exists",
        cause: { code: "EEXIST" },
      });
      expect(await storage.read("d/x")).toEqual(OLD);
      const listed: string[] = [];
      for await (const info of storage.list("")) listed.push(info.path);
      expect(listed).toEqual(["d/x"]);
    },
  );

  it("keeps the cause of a lost atomic create and of a missing object", async () => {
    const storage = await openStorage(await freshDir());
    await storage.write("once", OLD, { ifAbsent: true });
    await expect(storage.write("once", NEW, { ifAbsent: true })).rejects.toMatchObject({
      code: "already_exists",
      cause: { code: "EEXIST" },
    });
    await expect(storage.read("missing")).rejects.toMatchObject({ code: "not_found", cause: { code: "ENOENT" } });
    const memory = await openStorage("memory://faults-cause/root");
    await expect(memory.read("missing")).rejects.toMatchObject({ code: "not_found", cause: { code: "ENOENT" } });
  });
});

describe("two adapters on one root", () => {
  it("let exactly one of their racing atomic creates win; the rest get already_exists", async () => {
    const dir = await freshDir();
    const [a, b] = [await openStorage(dir), await openStorage(dir)];
    const results = await Promise.allSettled(
      Array.from({ length: 16 }, (_, i) => (i % 2 ? a : b).write("race/meta", new Uint8Array([i]), { ifAbsent: true })),
    );
    const won = results.flatMap((r, i) => (r.status === "fulfilled" ? [i] : []));
    expect(won).toHaveLength(1);
    for (const r of results)
      if (r.status === "rejected")
        expect(r.reason).toMatchObject({ code: "already_exists", cause: { code: "EEXIST" } });
    expect(await a.read("race/meta")).toEqual(new Uint8Array([won[0]!]));
    expect(await filesUnder(dir)).toEqual(["race/meta"]);
  });

  it("do not fail a write whose directory the other removes while it is being created", async () => {
    // What node's recursive mkdir reports when a concurrent rmdir wins: ENOENT from its check of the existing directory.
    const dir = await freshDir();
    const { fs, thrown } = failingFs({ call: "mkdir", errno: "ENOENT", times: 2 });
    const storage = new FsStorageAdapter("file", dir, fs, dir, { syncDirectories: true });
    await storage.write("d/x", NEW);
    expect(thrown).toHaveLength(2);
    expect(await filesUnder(dir)).toEqual(["d/x"]);
  });

  it("delete a path both, or neither, hold without failing, while the other writes beside it", async () => {
    const dir = await freshDir();
    const [a, b] = [await openStorage(dir), await openStorage(dir)];
    // a empties (and so removes) the directory b keeps writing into; b's writes recreate it.
    const churn = async (storage: StorageAdapter, name: string): Promise<void> => {
      for (let i = 0; i < 40; i++) {
        await storage.write(`d/${name}`, OLD);
        await Promise.all([a.delete(`d/${name}`), b.delete(`d/${name}`), a.delete("d/never")]);
      }
    };
    await Promise.all([churn(a, "x"), churn(b, "y")]);
    expect(await filesUnder(dir)).toEqual([]);
  });
});

describe("FaultyStorageAdapter's errno faults", () => {
  const AGREEMENT: readonly { errno: string; operation: FaultyOperation; call: FsCall; ifAbsent?: boolean }[] = [
    ...["EROFS", "EACCES", "EPERM", "ENOSPC", "EDQUOT", "EMFILE", "EIO", "EBUSY", "EINVAL", "ENOENT", "ENOTDIR"].map(
      (errno) => ({ errno, operation: "read" as const, call: "stat" as const }),
    ),
    ...["EROFS", "EACCES", "ENOSPC", "EMFILE", "EIO", "EINVAL", "ENOENT"].map((errno) => ({
      errno,
      operation: "write" as const,
      call: "handle.write" as const,
    })),
    { errno: "EEXIST", operation: "write", call: "link", ifAbsent: true },
    ...["EROFS", "EPERM", "EIO"].map((errno) => ({ errno, operation: "delete" as const, call: "unlink" as const })),
  ];
  it.each(AGREEMENT)(
    "report $errno on $operation as the local adapter does",
    async ({ errno, operation, call, ifAbsent }) => {
      const dir = await freshDir();
      await writeFile(join(dir, "obj"), OLD);
      const local = new FsStorageAdapter("file", dir, failingFs({ call, errno }).fs, dir, { syncDirectories: false });
      const run = (storage: StorageAdapter): Promise<unknown> =>
        operation === "read"
          ? storage.read("obj")
          : operation === "write"
            ? storage.write("obj", NEW, { ifAbsent: ifAbsent ?? false })
            : storage.delete("obj");
      const real = (await run(local).catch((e: unknown) => e)) as CheckpointError;
      const faulty = new FaultyStorageAdapter(await openStorage(await freshDir()), [{ operation, errno }]);
      const injected = (await run(faulty).catch((e: unknown) => e)) as CheckpointError;
      expect({ code: injected.code, transient: injected.transient }).toEqual({
        code: real.code,
        transient: real.transient,
      });
      expect(injected.cause).toMatchObject({ code: errno });
    },
  );
});
