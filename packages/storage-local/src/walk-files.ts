import { posix } from "node:path";
import PQueue from "p-queue";
import { type ObjectInfo, prefetched } from "@cairn/core/storage";
import type { FsPromisesLike } from "./fs-like.js";
import { MISSING_CODES, errnoOf } from "./fs-errors.js";

/** File system calls (readdir, stat) one listing makes at once. */
const LIST_CONCURRENCY = 32;
/** Entries of one directory a listing works on ahead of the one it yields. */
const LIST_AHEAD = 64;

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

/** How a walk stats a file it found, and the error it throws for a directory it could not read. */
interface WalkCalls {
  readonly stat: (path: string) => Promise<ObjectInfo | null>;
  readonly failed: (error: unknown, rel: string, dir: string) => unknown;
}

/**
 * The files under `rel` (a directory relative to `root`) whose paths start with `prefix`, in name
 * order, as `FsStorageAdapter.list` gives them: entries are stat'ed (`how.stat`) and
 * sub-directories read ahead of the consumer, a bounded number of calls at once.
 */
export function walkFiles(
  fs: FsPromisesLike,
  root: string,
  rel: string,
  prefix: string,
  how: WalkCalls,
): AsyncGenerator<ObjectInfo> {
  return walk(fs, root, rel, prefix, how, new PQueue({ concurrency: LIST_CONCURRENCY }));
}

async function* walk(
  fs: FsPromisesLike,
  root: string,
  rel: string,
  prefix: string,
  how: WalkCalls,
  calls: PQueue,
): AsyncGenerator<ObjectInfo> {
  let entries: { name: string | Buffer; isDirectory(): boolean; isFile(): boolean }[];
  const dir = posix.join(root, rel);
  try {
    entries = await calls.add(() => fs.readdir(dir, { withFileTypes: true }));
  } catch (error) {
    if (MISSING_CODES.has(errnoOf(error))) return;
    throw how.failed(error, rel, dir);
  }
  const jobs: (() => Promise<ObjectInfo[]>)[] = [];
  const names = entries.map((e) => ({ name: String(e.name), dir: e.isDirectory(), file: e.isFile() }));
  names.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  // Temp files are listed too: what a killed writer left must be found to be swept.
  for (const entry of names) {
    const path = rel ? `${rel}/${entry.name}` : entry.name;
    if (entry.dir && (path.startsWith(prefix) || prefix.startsWith(`${path}/`))) {
      jobs.push(() => collect(walk(fs, root, path, prefix, how, calls)));
    } else if (entry.file && path.startsWith(prefix)) {
      jobs.push(async () => {
        const info = await calls.add(() => how.stat(path));
        return info ? [info] : [];
      });
    }
  }
  // Up to LIST_AHEAD entries in flight, yielded in name order; each failure is thrown in its turn.
  for await (const infos of prefetched(jobs, LIST_AHEAD, (job) => job())) yield* infos;
}
