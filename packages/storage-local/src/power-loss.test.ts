import {
  DefaultSavePlanner,
  type HostTensor,
  hostTensor,
  isCheckpointError,
  load,
  readMetadata,
  save,
} from "@cairn/core";
import { seededRandom } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { FsStorageAdapter } from "./fs-storage-adapter.js";
import type { FileHandleLike, FsPromisesLike } from "./fs-like.js";

/** A file's bytes as written (the page cache) and as they would survive a power loss. */
interface Inode {
  data: Uint8Array;
  size: number;
  durable: Uint8Array;
  /** A failed fsync dropped its dirty pages' errors: later fsyncs succeed without making them durable (Linux). */
  lost: boolean;
}

/** A directory's names as they are, and as its last fsync made them. Directories themselves never vanish. */
interface Dir {
  entries: Map<string, Inode>;
  durable: Map<string, Inode>;
}

const ROOT = "/vol";

type Call = "open" | "write" | "sync" | "rename" | "link" | "unlink";

function errnoError(code: string, syscall: string, path: string): Error {
  return Object.assign(new Error(`${code}: injected, ${syscall} '${path}'`), { code, syscall, path });
}

const split = (path: string): [string, string] => {
  const at = path.lastIndexOf("/");
  return [path.slice(0, at) || "/", path.slice(at + 1)];
};

/**
 * An in-memory file system with POSIX's weakest durability: a file's bytes survive a power loss
 * only once fsynced, a name (of a file or a directory) only once its directory is. `crash()` freezes it (every later call
 * never settles, as in a dead process) and `recovered()` is what a reboot would find.
 */
class PowerLossFs {
  readonly dirs = new Map<string, Dir>();
  /** Directories whose names their parents' fsyncs made durable (the root always is). */
  readonly named = new Set<string>([ROOT]);
  calls = 0;
  crashed = false;
  #died!: () => void;
  /** Resolves at the crash. */
  readonly died = new Promise<void>((resolve) => (this.#died = resolve));
  /** Asked before each call: an errno to fail it with, or a crash. */
  constructor(
    private readonly before: (call: Call, path: string, n: number) => string | "crash" | undefined,
    /** Event-loop turns a call takes (fsyncs are slow, and the order of completions varies). */
    private readonly turns: (call: Call) => number = () => 0,
  ) {}

  async #gate(call: Call, path: string): Promise<void> {
    await Promise.resolve();
    for (let t = this.turns(call); t > 0; t--) await new Promise((resolve) => setImmediate(resolve));
    if (this.crashed) return new Promise<never>(() => undefined);
    const fault = this.before(call, path, this.calls++);
    if (fault === "crash") {
      this.crashed = true;
      this.#died();
      return new Promise<never>(() => undefined);
    }
    if (fault) throw errnoError(fault, call === "sync" ? "fsync" : call, path);
  }

  #dir(path: string): Dir {
    const dir = this.dirs.get(path);
    if (!dir) throw errnoError("ENOENT", "open", path);
    return dir;
  }

  recovered(): PowerLossFs {
    const fs = new PowerLossFs(() => undefined);
    const copies = new Map<Inode, Inode>();
    const copy = (inode: Inode): Inode => {
      const durable = inode.durable.slice();
      if (!copies.has(inode)) copies.set(inode, { data: durable, size: durable.length, durable, lost: false });
      return copies.get(inode)!;
    };
    const survives = (path: string): boolean => path === ROOT || (this.named.has(path) && survives(split(path)[0]));
    for (const [path, dir] of this.dirs) {
      if (!survives(path)) continue;
      const entries = new Map([...dir.durable].map(([name, inode]) => [name, copy(inode)]));
      fs.dirs.set(path, { entries, durable: new Map(entries) });
      fs.named.add(path);
    }
    return fs;
  }

  readonly api: FsPromisesLike = {
    open: async (path, flags) => {
      await this.#gate("open", path);
      const dir = this.dirs.get(path);
      if (dir) return this.#dirHandle(dir, path);
      const [parent, name] = split(path);
      const entries = this.#dir(parent).entries;
      let inode = entries.get(name);
      if (flags === "wx" && inode) throw errnoError("EEXIST", "open", path);
      if (flags === "wx" || flags === "w") {
        inode = { data: new Uint8Array(0), size: 0, durable: inode?.durable ?? new Uint8Array(0), lost: false };
        entries.set(name, inode);
      }
      if (!inode) throw errnoError("ENOENT", "open", path);
      return this.#fileHandle(inode, path);
    },
    mkdir: async (path) => {
      let first: string | undefined;
      for (let at = path; at !== "/" && !this.dirs.has(at); at = split(at)[0]) {
        this.dirs.set(at, { entries: new Map(), durable: new Map() });
        first = at;
      }
      return first;
    },
    rename: async (from, to) => {
      await this.#gate("rename", to);
      const [fromDir, fromName] = split(from);
      const [toDir, toName] = split(to);
      const inode = this.#dir(fromDir).entries.get(fromName);
      if (!inode) throw errnoError("ENOENT", "rename", from);
      this.#dir(fromDir).entries.delete(fromName);
      this.#dir(toDir).entries.set(toName, inode);
    },
    link: async (existing, created) => {
      await this.#gate("link", created);
      const [fromDir, fromName] = split(existing);
      const [toDir, toName] = split(created);
      const inode = this.#dir(fromDir).entries.get(fromName);
      if (!inode) throw errnoError("ENOENT", "link", existing);
      if (this.#dir(toDir).entries.has(toName)) throw errnoError("EEXIST", "link", created);
      this.#dir(toDir).entries.set(toName, inode);
    },
    unlink: async (path) => {
      await this.#gate("unlink", path);
      const [parent, name] = split(path);
      if (this.dirs.has(path)) throw errnoError("EISDIR", "unlink", path);
      if (!this.#dir(parent).entries.delete(name)) throw errnoError("ENOENT", "unlink", path);
    },
    rmdir: async (path) => {
      const dir = this.#dir(path);
      const children = [...this.dirs.keys()].some((p) => p.startsWith(`${path}/`));
      if (dir.entries.size > 0 || dir.durable.size > 0 || children) throw errnoError("ENOTEMPTY", "rmdir", path);
      this.dirs.delete(path);
    },
    stat: async (path) => {
      await Promise.resolve();
      if (this.crashed) return new Promise<never>(() => undefined);
      const isDir = this.dirs.has(path);
      const [parent, name] = split(path);
      const inode = this.dirs.get(parent)?.entries.get(name);
      if (!isDir && !inode) throw errnoError("ENOENT", "stat", path);
      return { size: inode?.size ?? 0, mtime: new Date(0), isFile: () => !isDir, isDirectory: () => isDir };
    },
    readdir: async (path) => {
      await Promise.resolve();
      if (this.crashed) return new Promise<never>(() => undefined);
      const dir = this.#dir(path);
      const subdirs = [...this.dirs.keys()].filter((p) => p !== path && split(p)[0] === path).map((p) => split(p)[1]);
      return [
        ...[...dir.entries.keys()].map((name) => ({ name, isDirectory: () => false, isFile: () => true })),
        ...subdirs.map((name) => ({ name, isDirectory: () => true, isFile: () => false })),
      ];
    },
  };

  #dirHandle(dir: Dir, path: string): FileHandleLike {
    const refuse = (): never => {
      throw errnoError("EISDIR", "read", path);
    };
    return {
      read: async () => refuse(),
      readv: async () => refuse(),
      write: async () => refuse(),
      truncate: async () => refuse(),
      stat: async () => ({ size: 0, isFile: () => false, isDirectory: () => true }),
      sync: async () => {
        await this.#gate("sync", path);
        dir.durable = new Map(dir.entries);
        for (const at of this.dirs.keys()) if (split(at)[0] === path) this.named.add(at);
      },
      close: async () => undefined,
    };
  }

  #fileHandle(inode: Inode, path: string): FileHandleLike {
    return {
      read: async (buffer, offset, length, position) => {
        const n = Math.max(0, Math.min(length, inode.size - position));
        buffer.set(inode.data.subarray(position, position + n), offset);
        return { bytesRead: n };
      },
      readv: async (buffers, position) => {
        let at = position;
        for (const b of buffers) {
          const n = Math.max(0, Math.min(b.byteLength, inode.size - at));
          b.set(inode.data.subarray(at, at + n));
          at += n;
        }
        return { bytesRead: at - position };
      },
      write: async (buffer, offset, length, position) => {
        await this.#gate("write", path);
        const at = position ?? inode.size;
        if (at + length > inode.data.length) {
          const grown = new Uint8Array(Math.max(at + length, inode.data.length * 2));
          grown.set(inode.data.subarray(0, inode.size));
          inode.data = grown;
        }
        inode.data.set(buffer.subarray(offset, offset + length), at);
        inode.size = Math.max(inode.size, at + length);
        return { bytesWritten: length };
      },
      truncate: async (length) => {
        inode.size = Math.min(inode.size, length);
      },
      stat: async () => ({ size: inode.size, isFile: () => true, isDirectory: () => false }),
      sync: async () => {
        try {
          await this.#gate("sync", path);
        } catch (error) {
          inode.lost = true;
          throw error;
        }
        if (!inode.lost) inode.durable = inode.data.slice(0, inode.size);
      },
      close: async () => undefined,
    };
  }
}

function storageOn(fs: PowerLossFs): FsStorageAdapter {
  void fs.api.mkdir(ROOT, { recursive: true });
  return new FsStorageAdapter("file", ROOT, fs.api, ROOT, { syncDirectories: true, directIo: false });
}

type State = Record<string, HostTensor<"float32">>;

function stateOf(next: () => number): State {
  const state: State = {};
  const count = 1 + Math.floor(next() * 5);
  for (let k = 0; k < count; k++) {
    const t = hostTensor("float32", [1 + Math.floor(next() * (next() < 0.3 ? 300_000 : 3000))]);
    for (let i = 0; i < t.data.length; i++) t.data[i] = k * 1e6 + i;
    state[`t${k}`] = t;
  }
  return state;
}

const copyOf = (state: State): State =>
  Object.fromEntries(Object.entries(state).map(([k, t]) => [k, { ...t, data: t.data.slice() }]));

/** Each tensor loaded is one of the versions it had while it was being saved. */
function expectOneOf(loaded: unknown, versions: readonly State[], what: string): void {
  if (loaded instanceof Error) throw new Error(`${what}: ${loaded.message}`, { cause: loaded });
  const back = loaded as State;
  expect(Object.keys(back).sort(), what).toEqual(Object.keys(versions[0]!).sort());
  for (const key of Object.keys(back)) {
    const bytes = Buffer.from(back[key]!.data.buffer, back[key]!.data.byteOffset, back[key]!.data.byteLength);
    const same = versions.some((v) => bytes.equals(Buffer.from(v[key]!.data.buffer, 0, v[key]!.data.byteLength)));
    expect(same, `${what}: ${key}`).toBe(true);
  }
}

const SEEDS = 40;
/** What the seeds made happen, so a change of the save's calls that makes them test nothing fails. */
const seen = { returned: 0, failed: 0, crashedCommitted: 0, crashedNot: 0 };

describe("file:// saves under injected faults, aborts and power loss (property)", () => {
  for (let seed = 1; seed <= SEEDS; seed++) {
    it(`seed ${seed}: a step is committed only once it loads after a power loss, and a failed save says why`, async () => {
      const next = seededRandom(seed * 7919);
      const pick = (n: number): number => Math.floor(next() * n);
      const committed = stateOf(next);
      const saved = stateOf(next);
      const versions = [copyOf(saved)];
      const controller = new AbortController();
      const events = new Map<number, "crash" | "abort" | "mutate" | string>();
      const fs = new PowerLossFs(
        (call, path, n) => {
          if (!path.includes("/run/1")) return undefined;
          const event = events.get(n);
          if (event === "abort") controller.abort();
          else if (event === "mutate") {
            for (const t of Object.values(saved)) t.data[0]! += 1;
            versions.push(copyOf(saved));
          } else if (event === "crash") return "crash";
          else if (event && (call === "write" || call === "sync" || call === "rename"))
            return call === "write" && next() < 0.3 ? "ENOSPC" : event;
          return undefined;
        },
        (call) => (call === "sync" ? pick(4) : pick(2)),
      );
      const storage = storageOn(fs);
      const planner = new DefaultSavePlanner({ minFileBytes: 0 });
      const concurrency = 1 + pick(3);
      await save(committed, { storage, path: "run/0", planner });
      // The calls a save of run/1 makes without faults, among which the events fall.
      const dry = new PowerLossFs(() => undefined);
      await save(saved, { storage: storageOn(dry), path: "run/1", planner, concurrency });
      const span = dry.calls + 2;
      const base = fs.calls;
      for (let e = pick(4); e > 0; e--) events.set(base + pick(span), next() < 0.8 ? "EIO" : "EAGAIN");
      if (next() < 0.25) events.set(base + pick(span), "abort");
      if (next() < 0.25) events.set(base + pick(span), "mutate");
      // Anywhere, or (as often) among the last calls: around the commit.
      if (next() < 0.6) events.set(base + (next() < 0.5 ? pick(span) : Math.max(0, span - 1 - pick(8))), "crash");
      const what = `seed ${seed}: events ${JSON.stringify([...events].map(([n, e]) => [n - base, e]))}`;

      let outcome: { ok: true } | { ok: false; error: unknown } | undefined;
      const saving = save(saved, {
        storage,
        path: "run/1",
        planner,
        concurrency,
        signal: controller.signal,
        retry: { baseDelayMs: 0, maxDelayMs: 1, maxAttempts: 3 },
      }).then(
        () => (outcome = { ok: true }),
        (error: unknown) => (outcome = { ok: false, error }),
      );
      // Settled, or frozen by the crash (its calls never settle).
      await Promise.race([saving, fs.died]);

      if (outcome && !outcome.ok) {
        const error = outcome.error;
        expect(isCheckpointError(error), `${what}: ${String(error)}`).toBe(true);
        const code = (error as { code: string }).code;
        if (controller.signal.aborted && !fs.crashed) expect(code, what).toBe("cancelled");
        else expect(["storage", "no_space", "invalid_argument", "cancelled"], what).toContain(code);
        if (code === "invalid_argument") expect(versions.length, what).toBeGreaterThan(1);
        if (!fs.crashed) expect(await storage.stat("run/1/metadata.json"), what).toBeNull();
      }
      // The power goes out now (if it has not already).
      const after = storageOn(fs.recovered());
      const back0 = await load({ storage: after, path: "run/0" });
      expectOneOf(back0, [committed], `${what}: run/0`);
      const back1 = await load({ storage: after, path: "run/1" }).catch((error: unknown) => error);
      const nothing = isCheckpointError(back1, "not_found") || isCheckpointError(back1, "not_committed");
      if (outcome?.ok === true) seen.returned++;
      else if (outcome) seen.failed++;
      else if (nothing) seen.crashedNot++;
      else seen.crashedCommitted++;
      if (outcome?.ok === true) expectOneOf(back1, versions, `${what}: run/1 returned`);
      else if (nothing) {
        // Nothing committed: a new save there succeeds despite what the old one left.
        await save(versions[0]!, { storage: after, path: "run/1", planner });
        expectOneOf(await load({ storage: after, path: "run/1" }), [versions[0]!], `${what}: run/1 saved anew`);
      } else expectOneOf(back1, versions, `${what}: run/1 committed before the crash`);
    });
  }

  it("made saves return, fail, and die before and after their commit", () => {
    expect(seen.returned, JSON.stringify(seen)).toBeGreaterThan(3);
    expect(seen.failed, JSON.stringify(seen)).toBeGreaterThan(3);
    expect(seen.crashedCommitted, JSON.stringify(seen)).toBeGreaterThan(0);
    expect(seen.crashedNot, JSON.stringify(seen)).toBeGreaterThan(3);
  });
});

describe("a failure of the directory's fsync after metadata.json is linked", () => {
  /** Fails the directory's fsyncs from the one after metadata.json's link on, `times` of them. */
  function failingAfterLink(errno: string, times: number): PowerLossFs {
    let linked = false;
    let failed = 0;
    return new PowerLossFs((call, path) => {
      if (call === "link" && path.endsWith("/run/1/metadata.json")) linked = true;
      if (linked && call === "sync" && path.endsWith("/run/1") && failed < times) {
        failed++;
        return errno;
      }
      return undefined;
    });
  }
  const planner = new DefaultSavePlanner({ minFileBytes: 0 });
  const retry = { baseDelayMs: 0, maxDelayMs: 1 };

  it("once (EIO): the save returns only once the commit survives a power loss", async () => {
    const fs = failingAfterLink("EIO", 1);
    const state = stateOf(seededRandom(1));
    await save(state, { storage: storageOn(fs), path: "run/1", planner, retry });
    expectOneOf(await load({ storage: storageOn(fs.recovered()), path: "run/1" }), [state], "after a power loss");
  });

  it("for good (EROFS): the save fails, and leaves no step that is listed but cannot load", async () => {
    const fs = failingAfterLink("EROFS", Infinity);
    const state = stateOf(seededRandom(2));
    const storage = storageOn(fs);
    const error = await save(state, { storage, path: "run/1", planner, retry }).catch((e: unknown) => e);
    const back = await load({ storage, path: "run/1" }).catch((e: unknown) => e);
    if (error instanceof Error) {
      expect(isCheckpointError(back, "not_found") || isCheckpointError(back, "not_committed"), String(back)).toBe(true);
    } else expectOneOf(back, [state], "returned");
  });
});

describe("two saves racing to one path (property)", () => {
  for (let seed = 1; seed <= 8; seed++) {
    it(`seed ${seed}: one commits, the other says already_exists and leaves no file, and a power loss keeps the winner`, async () => {
      const next = seededRandom(seed * 104729);
      const fs = new PowerLossFs(
        () => undefined,
        (call) => (call === "sync" ? Math.floor(next() * 4) : Math.floor(next() * 2)),
      );
      const storage = storageOn(fs);
      const planner = new DefaultSavePlanner({ minFileBytes: 0 });
      const states = [stateOf(next), stateOf(next)];
      const results = await Promise.allSettled(
        states.map((state) =>
          save(state, { storage, path: "run/1", planner, concurrency: 1 + Math.floor(next() * 3) }),
        ),
      );
      const won = results.findIndex((r) => r.status === "fulfilled");
      expect(won, JSON.stringify(results)).toBeGreaterThanOrEqual(0);
      const lost = results[1 - won]!;
      expect(lost.status === "rejected" && isCheckpointError(lost.reason, "already_exists"), String(lost)).toBe(true);
      const back = await load({ storage: storageOn(fs.recovered()), path: "run/1" });
      expectOneOf(back, [states[won]!], `seed ${seed}`);
      // The loser removed its data files; no temp file is left.
      const names = [...fs.dirs.get(`${ROOT}/run/1`)!.entries.keys()].filter((n) => n !== "metadata.json").sort();
      expect(names).toEqual(Object.keys((await readMetadata({ storage, path: "run/1" })).files).sort());
    });
  }
});
