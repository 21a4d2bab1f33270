import { fileURLToPath } from "node:url";
import { rankResults, runTypeScript, typeScriptCommand } from "@cairn/core/testing";

const CAIRN_RUN = fileURLToPath(new URL("../../distributed/src/cairn-run.ts", import.meta.url));

/**
 * Runs the rank fixture on 3 ranks through cairn-run and returns each rank's `RESULT` line, in rank
 * order; a failed launch throws with its output. Each rank's command is the fixture under
 * spawnTypeScript's loader (how cairn-run starts a script is tests/src/distributed.test.ts's).
 */
export async function runRanks<T extends { rank: number }>(fixture: string, args: readonly string[]): Promise<T[]> {
  const out = await runTypeScript(CAIRN_RUN, ["--nproc-per-node", "3", ...typeScriptCommand(fixture), ...args]);
  if (out.code !== 0) throw new Error(`cairn-run exited ${out.code}\n${out.stdout}\n${out.stderr}`);
  return rankResults<T>(out.stdout);
}
