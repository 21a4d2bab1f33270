import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { runTypeScript } from "@cairn/core/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { interrupted } from "./interrupted-run.js";

const demo = fileURLToPath(new URL("./train.ts", import.meta.url));
const FINAL = /^final weights crc32c ([0-9a-f]{8}) \(steps 0–(\d+)\)$/m;
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "cairn-demo-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("the demo", () => {
  it(
    "prints a line per committed step and the final weights, and nothing from tfjs",
    { timeout: 120_000 },
    async () => {
      const run = await runTypeScript(demo, ["--path", join(dir, "lines"), "--steps", "30", "--interval", "10"]);
      expect(run.code, run.stderr).toBe(0);
      expect(run.stderr).toBe("");
      const lines = run.stdout.trimEnd().split("\n");
      expect(lines.slice(0, -1).sort()).toEqual(
        ["committed step 0", "committed step 10", "committed step 20", "committed step 29"].map((s) =>
          expect.stringMatching(new RegExp(`^${s}  loss \\d+\\.\\d+  \\d+\\.\\d\\d s$`)),
        ),
      );
      expect(lines.at(-1)).toMatch(FINAL);
    },
  );

  it(
    "an interrupted and resumed run ends with the same weights as an uninterrupted one",
    { timeout: 180_000 },
    async () => {
      const args = (name: string): string[] => ["--path", join(dir, name), "--steps", "1000", "--interval", "100"];
      const straight = await runTypeScript(demo, args("straight"));
      expect(straight.code, straight.stderr).toBe(0);
      const expected = FINAL.exec(straight.stdout);
      expect(expected?.[2], straight.stdout).toBe("999");

      // Ctrl-C in a terminal sends SIGINT, `kill` sends SIGTERM: both checkpoint and exit 0.
      let resumedFrom = -1;
      for (const signal of ["SIGTERM", "SIGINT"] as const) {
        const stopped = await interrupted(demo, args("resumed"), signal, Math.floor(Math.random() * 300));
        expect(stopped.code, stopped.stderr).toBe(0);
        expect(stopped.stdout).toContain(`received ${signal}: checkpointing the next step, then stopping`);
        const at = /^stopped at step (\d+); run again to resume$/m.exec(stopped.stdout);
        expect(at, stopped.stdout).not.toBeNull();
        expect(stopped.stdout).toContain(`committed step ${at![1]}  loss`);
        expect(Number(at![1])).toBeGreaterThan(resumedFrom);
        if (resumedFrom >= 0) expect(stopped.stdout).toContain(`resumed from step ${resumedFrom} in `);
        resumedFrom = Number(at![1]);
      }
      const finished = await runTypeScript(demo, args("resumed"));
      expect(finished.code, finished.stderr).toBe(0);
      expect(finished.stdout).toMatch(new RegExp(`^resumed from step ${resumedFrom} in `));
      expect(FINAL.exec(finished.stdout)?.[1], finished.stdout).toBe(expected![1]);

      // Run again once done: nothing to train, the same weights.
      const again = await runTypeScript(demo, args("resumed"));
      expect(again.code, again.stderr).toBe(0);
      expect(again.stdout).toContain("resumed from step 999 in ");
      expect(FINAL.exec(again.stdout)?.[1]).toBe(expected![1]);
    },
  );

  // A process of its own (Node, tsx, tfjs): seconds on a loaded machine.
  it("refuses bad arguments with a clear message", { timeout: 60_000 }, async () => {
    const run = await runTypeScript(demo, ["--steps", "zero"]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("--steps, --interval and --keep take positive integers");
  });
});
