import { fileURLToPath } from "node:url";
import { rankResults, runTypeScript } from "@cairn/core/testing";

const CAIRN_RUN = fileURLToPath(new URL("../../distributed/src/cairn-run.ts", import.meta.url));

/** Runs the rank fixture on 3 ranks through cairn-run and returns each rank's `RESULT` line, in rank order; a failed launch throws with its output. */
export async function runRanks<T extends { rank: number }>(fixture: string, args: readonly string[]): Promise<T[]> {
  const out = await runTypeScript(CAIRN_RUN, ["--nproc-per-node", "3", fixture, ...args]);
  if (out.code !== 0) throw new Error(`cairn-run exited ${out.code}\n${out.stdout}\n${out.stderr}`);
  return rankResults<T>(out.stdout);
}
