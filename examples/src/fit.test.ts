import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { runTypeScript } from "@cairn/core/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { interrupted } from "./interrupted-run.js";

const demo = fileURLToPath(new URL("./fit.ts", import.meta.url));
const FINAL = /^final weights crc32c ([0-9a-f]{8}) after step (\d+)/m;
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "cairn-demo-fit-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("the fit demo", () => {
  it(
    "prints a line per committed step and the final weights; stopped and run again, it ends with the same weights",
    { timeout: 180_000 },
    async () => {
      const args = (name: string): string[] => ["--path", join(dir, name), "--epochs", "3", "--every", "20"];
      const straight = await runTypeScript(demo, args("straight"));
      expect(straight.code, straight.stderr).toBe(0);
      expect(straight.stderr).toBe("");
      const lines = straight.stdout.trimEnd().split("\n");
      // 800 samples in batches of 25: 32 batches an epoch, 96 in all; every 20, and the last.
      expect(lines.slice(0, -1).sort()).toEqual(
        [20, 40, 60, 80, 96].map((step) =>
          expect.stringMatching(
            new RegExp(`^committed step ${step}  (val_loss \\d\\.\\d+  )?loss \\d\\.\\d+  \\d+\\.\\d\\d s$`),
          ),
        ),
      );
      const expected = FINAL.exec(lines.at(-1)!);
      expect(expected?.[2], straight.stdout).toBe("96");

      const stopped = await interrupted(demo, args("resumed"), "SIGINT");
      expect(stopped.code, stopped.stderr).toBe(0);
      expect(stopped.stdout).toContain("received SIGINT: checkpointing after this batch, then stopping");
      const at = /^stopped at step (\d+) /m.exec(stopped.stdout);
      expect(at, stopped.stdout).not.toBeNull();
      expect(stopped.stdout).toMatch(new RegExp(`^committed step ${at![1]}  `, "m"));
      expect(stopped.stdout).not.toMatch(FINAL);

      const resumed = await runTypeScript(demo, args("resumed"));
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(resumed.stdout).toMatch(new RegExp(`^resumed from step ${at![1]} under `));
      expect(FINAL.exec(resumed.stdout)?.[1], resumed.stdout).toBe(expected![1]);

      const again = await runTypeScript(demo, args("resumed"));
      expect(again.code, again.stderr).toBe(0);
      expect(again.stdout).toMatch(/already finished step 96 \(3 of 3 epochs done\): nothing to train/);
      expect(FINAL.exec(again.stdout)?.[1]).toBe(expected![1]);
    },
  );

  it("refuses bad arguments with a clear message", async () => {
    const run = await runTypeScript(demo, ["--every", "0"]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("--epochs takes a positive integer, --every a positive integer or epoch");
  });
});
