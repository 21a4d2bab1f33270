// cairn-run: starts N local ranks of a script, like torchrun. The logic is in launch-ranks.ts.
import { isCheckpointError } from "@cairn/core";
import { LAUNCH_USAGE, type LaunchOptions, launchRanks, parseLaunchArgs } from "./launch-ranks.js";

async function main(): Promise<void> {
  let options: LaunchOptions | "help";
  try {
    options = parseLaunchArgs(process.argv.slice(2));
  } catch (error) {
    process.stderr.write(`cairn-run: ${(error as Error).message}\n${LAUNCH_USAGE}\n`);
    process.exit(2);
  }
  if (options === "help") {
    process.stdout.write(`${LAUNCH_USAGE}\n`);
    return;
  }
  try {
    const result = await launchRanks(options);
    if (result.failedRank !== undefined)
      process.stderr.write(
        `cairn-run: rank ${result.failedRank} failed with exit code ${result.exitCode}; the other ranks were stopped\n`,
      );
    process.exitCode = result.exitCode;
  } catch (error) {
    process.stderr.write(`cairn-run: ${isCheckpointError(error) ? error.message : String(error)}\n`);
    process.exitCode = 2;
  }
}

await main();
