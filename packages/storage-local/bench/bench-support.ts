import { execFileSync } from "node:child_process";
import { open, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";

/** Empties the kernel's page cache so a load reads from disk; false where this process may not (not root, not Linux). */
export async function dropCaches(): Promise<boolean> {
  try {
    execFileSync("sync");
    await writeFile("/proc/sys/vm/drop_caches", "3");
    return true;
  } catch {
    return false;
  }
}

/**
 * Reads every file under `dir` once, so a following load finds it in the page cache: Cairn writes
 * data files with O_DIRECT, which leaves nothing cached, where a buffered write leaves it all.
 */
export async function warmCache(dir: string): Promise<void> {
  const buffer = new Uint8Array(16 << 20);
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile()) continue;
    const handle = await open(join(entry.parentPath, entry.name), "r");
    try {
      while ((await handle.read(buffer, 0, buffer.byteLength)).bytesRead > 0);
    } finally {
      await handle.close();
    }
  }
}

/** The upper median: the middle value, or the higher of the two middle ones. */
export function median(xs: readonly number[]): number {
  return [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
}
