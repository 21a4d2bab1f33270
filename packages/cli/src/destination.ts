import { storageUrl } from "@cairn/core";
import { UsageError } from "./command.js";

/**
 * Refuses to write to memory:// when nothing in this process will read it afterwards: memory://
 * storage lives only as long as the process, so the result would vanish as `cairn` exits.
 */
export function refuseVanishingMemory(destination: string, memoryVanishes: boolean, what: string): void {
  if (!memoryVanishes || storageUrl(destination).protocol !== "memory:") return;
  throw new UsageError(
    `${destination} is memory:// storage, which lives only as long as this cairn process: the ${what} would vanish as it exits; use it in the same process with --then (e.g. --then verify ${destination})`,
  );
}
