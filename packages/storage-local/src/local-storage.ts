import { promises as nodeFs } from "node:fs";
import { fileURLToPath } from "node:url";
import type { StorageAdapter } from "@cairn/core";
import { invalidUrl, redactUrl, refuseQueryAndFragment } from "@cairn/core/storage";
import { Volume, createFsFromVolume } from "memfs";
import { blockingFs } from "./blocking-fs.js";
import { FsStorageAdapter } from "./fs-storage-adapter.js";
import { memoryNames } from "./memory-location.js";
import type { FsPromisesLike } from "./fs-like.js";

/** The directory a `file://` URL names; a URL no local path can come from is `invalid_argument`, never a TypeError. */
function fileUrlPath(url: URL): string {
  refuseQueryAndFragment("file", url);
  let path: string;
  try {
    path = fileURLToPath(url);
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === "ERR_INVALID_FILE_URL_HOST") {
      throw invalidUrl(
        "file",
        url,
        `a file:// URL cannot name a host ("${url.hostname}"); for the local path write file:///${url.hostname}${url.pathname} (three slashes), or a plain path`,
        error,
      );
    }
    if (code === "ERR_INVALID_FILE_URL_PATH") {
      throw invalidUrl(
        "file",
        url,
        'an encoded "/" (%2F) cannot be part of a file name; separate directories with a plain "/"',
        error,
      );
    }
    throw invalidUrl(
      "file",
      url,
      `not a local file URL (${(error as Error).message}); write file:///<absolute path> or a plain path`,
      error,
    );
  }
  if (path.includes("\0")) throw invalidUrl("file", url, "a file name cannot hold a NUL byte (%00); remove it");
  return path;
}

/**
 * Opens `file://` storage rooted at the URL's directory, with durable (fsynced) writes. Throws
 * `invalid_argument` for a URL that names no local path: with a host, an encoded "/", a NUL
 * byte, a query or a fragment.
 */
export function openFileStorage(url: URL): StorageAdapter {
  return new FsStorageAdapter("file", redactUrl(url), nodeFs as unknown as FsPromisesLike, fileUrlPath(url), {
    syncDirectories: true,
    directIo: true,
    checksummedReads: true,
    portable: { module: import.meta.url, factory: "openFileStorageForWorker", url: url.href },
  });
}

/**
 * The same `file://` storage for a worker thread of its own (a background save's upload
 * worker): its calls block that thread until done (see `blockingFs`).
 */
export function openFileStorageForWorker(url: URL): StorageAdapter {
  return new FsStorageAdapter("file", redactUrl(url), blockingFs, fileUrlPath(url), {
    syncDirectories: true,
    directIo: true,
  });
}

let volume = new Volume();

/**
 * The process-wide memfs volume behind every `memory://` URL: `memory://name/a/b` is the
 * directory `/name/a/b` in it, so a save and a load in one process see the same bytes.
 */
export function memoryVolume(): Volume {
  return volume;
}

/** Empties every `memory://` location (between tests). Adapters opened before keep the old volume. */
export function resetMemoryStorage(): void {
  volume = new Volume();
}

/** The directory in the volume a `memory://name/a/b` URL names: `/name/a/b`. */
function memoryDir(url: URL): string {
  return `/${memoryNames(url).join("/")}`;
}

/**
 * memfs made to refuse what POSIX refuses where it would lose data: its rename onto a directory
 * replaces the directory and everything in it (rename(2): EISDIR), and its link onto a directory
 * says ENOENT (link(2): EEXIST).
 */
function posixMemfs(memfs: FsPromisesLike): FsPromisesLike {
  const isDirectory = async (path: string): Promise<boolean> =>
    (await memfs.stat(path).catch(() => undefined))?.isDirectory() === true;
  const refused = (code: string, syscall: string, from: string, to: string): Error =>
    Object.assign(new Error(`${code}: ${syscall} '${from}' -> '${to}'`), { code, syscall, path: from, dest: to });
  return {
    ...memfs,
    rename: async (from, to) => {
      if (await isDirectory(to)) throw refused("EISDIR", "rename", from, to);
      return memfs.rename(from, to);
    },
    link: async (existing, created) => {
      if (await isDirectory(created)) throw refused("EEXIST", "link", existing, created);
      return memfs.link(existing, created);
    },
  };
}

/** Opens `memory://name/path` storage; throws `invalid_argument` for a URL without a name or with a segment that is not a plain name. */
export function openMemoryStorage(url: URL): StorageAdapter {
  const dir = memoryDir(url);
  const fs = posixMemfs(createFsFromVolume(volume).promises as unknown as FsPromisesLike);
  return new FsStorageAdapter("memory", redactUrl(url), fs, dir, { syncDirectories: false });
}
