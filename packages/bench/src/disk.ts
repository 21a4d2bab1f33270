import { execFileSync } from "node:child_process";
import { randomFillSync } from "node:crypto";
import { constants } from "node:fs";
import { open, rm } from "node:fs/promises";
import { join } from "node:path";
import { pageAlignedSharedBytes } from "@cairn/core/storage";
import { MiB, withTempDir } from "./support.js";

/** Bytes per write or read, as `dd bs=16M`. */
const BLOCK = 16 * MiB;
const PAGE = 4096;

/** Page-aligned memory holding `bytes` (rounded up to a page: O_DIRECT writes whole pages). */
export function alignedBytes(bytes: number): Uint8Array {
  return pageAlignedSharedBytes(Math.ceil(bytes / PAGE) * PAGE);
}

/** Fills `data` with random bytes, so nothing below the file system can compress or skip them. */
export function fillRandom(data: Uint8Array): void {
  for (let at = 0; at < data.byteLength; at += 64 * MiB)
    randomFillSync(data.subarray(at, Math.min(data.byteLength, at + 64 * MiB)));
}

/** A file's bytes read straight into page-aligned memory, ready for `directWrite`. */
export async function readAligned(path: string): Promise<Uint8Array> {
  const handle = await open(path, "r");
  try {
    const size = (await handle.stat()).size;
    const data = alignedBytes(size).subarray(0, size);
    for (let at = 0; at < size;) {
      const { bytesRead } = await handle.read(data, at, Math.min(BLOCK, size - at), at);
      if (bytesRead === 0) throw new Error(`${path} ended at ${at} of ${size} bytes`);
      at += bytesRead;
    }
    return data;
  } finally {
    await handle.close();
  }
}

/**
 * What `dd bs=16M oflag=direct conv=fsync` does, from memory: writes `data` (page-aligned) to a
 * new file in 16 MiB O_DIRECT writes, one after another, pads the last page, truncates back to
 * the length and fsyncs. The disk's write limit for these bytes.
 */
export async function directWrite(path: string, data: Uint8Array): Promise<void> {
  const handle = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_DIRECT!);
  try {
    const padded = new Uint8Array(data.buffer, data.byteOffset, Math.ceil(data.byteLength / PAGE) * PAGE);
    for (let at = 0; at < padded.byteLength;) {
      at += (await handle.write(padded, at, Math.min(BLOCK, padded.byteLength - at), at)).bytesWritten;
    }
    if (padded.byteLength !== data.byteLength) await handle.truncate(data.byteLength);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Reads each file whole with `dd bs=16M` into /dev/null, one after another (cold when the caller dropped the page cache). */
export function ddRead(paths: readonly string[]): void {
  for (const path of paths) execFileSync("dd", [`if=${path}`, "of=/dev/null", "bs=16M"], { stdio: "ignore" });
}

/** The disk under `CAIRN_BENCH_DIR` (or the temp dir), measured as `dd` would, in MiB/s. */
export interface DiskFigures {
  readonly bytes: number;
  readonly directWriteFsync: number;
  /** Read right after the direct write, which leaves nothing in the page cache. */
  readonly coldRead: number;
  readonly warmRead: number;
}

/**
 * Measures the disk with `bytes` of random data: a direct write + fsync, then a cold read (the
 * direct write left nothing cached, so no root needed), then a warm one.
 */
export async function measureDisk(bytes: number): Promise<DiskFigures> {
  const data = alignedBytes(bytes);
  fillRandom(data);
  return withTempDir(async (dir) => {
    const file = join(dir, "disk");
    const rate = (seconds: number): number => bytes / MiB / seconds;
    let started = performance.now();
    await directWrite(file, data);
    const directWriteFsync = rate((performance.now() - started) / 1000);
    started = performance.now();
    ddRead([file]);
    const coldRead = rate((performance.now() - started) / 1000);
    ddRead([file]);
    started = performance.now();
    ddRead([file]);
    const warmRead = rate((performance.now() - started) / 1000);
    await rm(file);
    return { bytes, directWriteFsync, coldRead, warmRead };
  }, "cairn-disk-");
}
