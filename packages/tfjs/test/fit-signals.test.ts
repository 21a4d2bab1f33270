// The fit fixture in child processes, stopped by a real signal: the run checkpoints after the
// batch it arrived in, fit resolves, the process exits 0 after close(), and the next process
// ends with the weights of an uninterrupted run, bit for bit.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { runTypeScript, rankResults } from "@cairn/core/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const child = fileURLToPath(new URL("./fixtures/fit-run.ts", import.meta.url));
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "cairn-fit-signals-"));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

interface Result {
  rank: number;
  preempted: boolean;
  step: number;
  epochs: number[];
  crcs: string[];
}

async function run(root: string, mode: string, stopAt?: string): Promise<{ result: Result; stdout: string }> {
  const done = await runTypeScript(child, [join(dir, root), mode, ...(stopAt ? [stopAt] : [])]);
  expect(done.code, done.stderr).toBe(0);
  expect(done.signal).toBeNull();
  const [result] = rankResults<Result>(done.stdout.replace("RESULT {", 'RESULT {"rank":0,'));
  expect(result, done.stdout).toBeDefined();
  return { result: result!, stdout: done.stdout };
}

/** One uninterrupted run per mode, shared by the cases. */
const straightRuns = new Map<string, Promise<{ result: Result; stdout: string }>>();
const straightRun = (mode: string): Promise<{ result: Result; stdout: string }> => {
  if (!straightRuns.has(mode)) straightRuns.set(mode, run(`${mode}-straight`, mode));
  return straightRuns.get(mode)!;
};

describe.each([
  ["fitDataset", "1:7", 28],
  ["fit", "1:7:SIGINT", 28],
  ["fitDataset", "0:19", 20],
])("%s, a signal before batch %s", (mode, stopAt, step) => {
  it(
    "checkpoints that batch, exits 0, and the resumed run ends bit-identical to an uninterrupted one",
    { timeout: 180_000 },
    async () => {
      const name = `${mode}-${stopAt.replaceAll(":", "-")}`;
      const [straight, stopped] = await Promise.all([straightRun(mode), run(name, mode, stopAt)]);
      expect(straight.result).toMatchObject({ preempted: false, step: 60, epochs: [0, 1, 2] });
      expect(stopped.result).toMatchObject({ preempted: true, step });
      const signal = stopAt.split(":")[2] ?? "SIGTERM";
      expect(stopped.stdout).toContain(`received ${signal}: checkpointing after this batch, then stopping`);
      expect(stopped.stdout).toMatch(new RegExp(`^committed ${step}$`, "m"));
      expect(stopped.stdout).toMatch(new RegExp(`^stopped at step ${step} \\(`, "m"));

      const resumed = await run(name, mode);
      expect(resumed.stdout).toMatch(new RegExp(`^resumed from step ${step} under `, "m"));
      expect(resumed.result).toMatchObject({ preempted: false, step: 60 });
      expect(resumed.result.crcs).toEqual(straight.result.crcs);
      expect(stopped.result.crcs).not.toEqual(straight.result.crcs);
    },
  );
});
