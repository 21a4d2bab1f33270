// PowerLossFs: a file system model for crash-consistency tests of anything that writes through
// FsStorageAdapter (saves, retention, gc, replication). Test-only; imports node:fs-free code alone.
import { FsStorageAdapter } from "../fs-storage-adapter.js";
import type { FileHandleLike, FsPromisesLike } from "../fs-like.js";

/** A file's bytes as written (the page cache) and as they would survive a power loss. */
interface Inode {
  data: Uint8Array;
  size: number;
  durable: Uint8Array;
  /** A failed fsync dropped its dirty pages' errors: later fsyncs succeed without making them durable (Linux). */
  lost: boolean;
}

/** A directory's names as they are, and as its last fsync made them. */
interface Dir {
  entries: Map<string, Inode>;
  durable: Map<string, Inode>;
}

/** Where `powerLossStorage` roots its adapter. */
export const POWER_LOSS_ROOT = "/vol";
const ROOT = POWER_LOSS_ROOT;

/** The calls that can fail or crash. */
export type PowerLossCall = "open" | "write" | "sync" | "rename" | "link" | "unlink";
/** Asked before the `n`-th call: an errno to fail it with, "crash" to freeze the file system, or nothing. */
export type PowerLossFaults = (call: PowerLossCall, path: string, n: number) => string | "crash" | undefined;
/** Event-loop turns a call takes. */
export type PowerLossTurns = (call: PowerLossCall) => number;

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
export class PowerLossFs {
  readonly dirs = new Map<string, Dir>();
  /** Directories whose names their parents' fsyncs made durable (the root always is). */
  readonly named = new Set<string>([ROOT]);
  /** Directories removed since their parent's last fsync: a power loss brings them back as they were durably. */
  readonly removed = new Map<string, Dir>();
  calls = 0;
  crashed = false;
  #died!: () => void;
  /** Resolves at the crash. */
  readonly died = new Promise<void>((resolve) => (this.#died = resolve));
  /** Asked before each call: an errno to fail it with, or a crash. */
  constructor(
    private readonly before: PowerLossFaults,
    /** Event-loop turns a call takes (fsyncs are slow, and the order of completions varies). */
    private readonly turns: PowerLossTurns = () => 0,
  ) {}

  async #gate(call: PowerLossCall, path: string): Promise<void> {
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

  /** What a reboot would find, on a file system that fails and turns as `before` and `turns` say (by default: never, at once). */
  recovered(before: PowerLossFaults = () => undefined, turns?: PowerLossTurns): PowerLossFs {
    const fs = new PowerLossFs(before, turns);
    const copies = new Map<Inode, Inode>();
    const copy = (inode: Inode): Inode => {
      const durable = inode.durable.slice();
      if (!copies.has(inode)) copies.set(inode, { data: durable, size: durable.length, durable, lost: false });
      return copies.get(inode)!;
    };
    const survives = (path: string): boolean => path === ROOT || (this.named.has(path) && survives(split(path)[0]));
    for (const [path, dir] of [...this.removed, ...this.dirs]) {
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
        // A name removed but not durably so still holds the old directory's durable entries.
        this.dirs.set(at, { entries: new Map(), durable: this.removed.get(at)?.durable ?? new Map() });
        this.removed.delete(at);
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
      if (dir.entries.size > 0 || children) throw errnoError("ENOTEMPTY", "rmdir", path);
      this.dirs.delete(path);
      this.removed.set(path, dir);
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
        for (const at of this.removed.keys())
          if (split(at)[0] === path) {
            this.removed.delete(at);
            this.named.delete(at);
          }
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

/**
 * A durable (directories fsynced) file:// adapter over `fs`, rooted at `dir`: a directory that
 * exists, durably, as a mount point would (created here if missing).
 */
export function powerLossStorage(fs: PowerLossFs, dir = ROOT): FsStorageAdapter {
  for (let at = dir; at !== "/"; at = split(at)[0]) {
    if (!fs.dirs.has(at)) fs.dirs.set(at, { entries: new Map(), durable: new Map() });
    fs.named.add(at);
  }
  return new FsStorageAdapter("file", dir, fs.api, dir, { syncDirectories: true, directIo: false });
}
