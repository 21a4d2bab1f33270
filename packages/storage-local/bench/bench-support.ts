import { execFileSync } from "node:child_process";
import { writeFile } from "node:fs/promises";

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

/** The upper median: the middle value, or the higher of the two middle ones. */
export function median(xs: readonly number[]): number {
  return [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
}
