import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { runTypeScript } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";

const child = fileURLToPath(new URL("./fixtures/resume-child.ts", import.meta.url));
let root: string;
afterAll(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});

async function leg(mode: string, url: string, n: number): Promise<Record<string, Record<string, string>>> {
  const run = await runTypeScript(child, [mode, url, String(n)]);
  expect(run.code, run.stderr).toBe(0);
  return JSON.parse(run.stdout) as Record<string, Record<string, string>>;
}

describe("resuming tfjs training from a checkpoint", () => {
  it(
    "is exact: 2N steps straight equal N steps, a fresh process, a restore and N more, bit for bit",
    { timeout: 180_000 },
    async () => {
      root = await mkdtemp(join(tmpdir(), "cairn-resume-"));
      const url = `file://${root}`;
      const n = 12;
      const [straight] = await Promise.all([leg("straight", url, n), leg("first", url, n)]);
      const resumed = await leg("resume", url, n);
      expect(Object.keys(resumed).sort()).toEqual([
        "adadelta",
        "adagrad",
        "adam",
        "adamax",
        "momentum",
        "rmsprop",
        "sgd",
      ]);
      for (const name of Object.keys(straight)) {
        // Optimizer slots exist and the weights moved: the comparison covers real state.
        expect(Object.keys(straight[name]!).length, name).toBeGreaterThan(4);
        expect(resumed[name], name).toEqual(straight[name]);
      }
      expect(straight.adam!["optim.iterations"]).toBe(String(2 * n));
      expect(Object.keys(straight.adam!)).toEqual(
        expect.arrayContaining(["optim.scalars.accBeta1", "optim.scalars.accBeta2"]),
      );
    },
  );
});
