import { promises as nodeFs } from "node:fs";
import { fileURLToPath } from "node:url";
import { type StorageAdapter, redactUrl } from "@cairn/core";
import { Volume, createFsFromVolume } from "memfs";
import { blockingFs } from "./blocking-fs.js";
import { type FsPromisesLike, FsStorageAdapter } from "./fs-storage-adapter.js";

/** Opens `file://` storage rooted at the URL's directory, with durable (fsynced) writes. */
export function openFileStorage(url: URL): StorageAdapter {
  return new FsStorageAdapter("file", redactUrl(url), nodeFs as unknown as FsPromisesLike, fileURLToPath(url), {
    syncDirectories: true,
    directIo: true,
    portable: { module: import.meta.url, factory: "openFileStorageForWorker", url: url.href },
  });
}

/**
 * The same `file://` storage for a worker thread of its own (a background save's upload
 * worker): its calls block that thread until done (see `blockingFs`).
 */
export function openFileStorageForWorker(url: URL): StorageAdapter {
  return new FsStorageAdapter("file", redactUrl(url), blockingFs, fileURLToPath(url), { syncDirectories: true, directIo: true });
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

export function openMemoryStorage(url: URL): StorageAdapter {
  const fs = createFsFromVolume(volume).promises as unknown as FsPromisesLike;
  const dir = `/${decodeURIComponent(url.host)}${decodeURIComponent(url.pathname)}`.replace(/\/+$/, "") || "/";
  return new FsStorageAdapter("memory", redactUrl(url), fs, dir, { syncDirectories: false });
}
