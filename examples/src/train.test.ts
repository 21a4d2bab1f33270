import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { runTypeScript } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";

const demo = fileURLToPath(new URL("./train.ts", import.meta.url));
let dir: string;
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("the demo", () => {
  it("trains, checkpoints, and resumes from the latest step when run again", { timeout: 120_000 }, async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-demo-"));
    const path = join(dir, "ckpt");
    const first = await runTypeScript(demo, ["--path", path, "--steps", "30", "--interval", "10"]);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toContain("training from scratch");
    expect(first.stdout).toContain("checkpoints kept: 10, 20, 29");
    const second = await runTypeScript(demo, ["--path", path, "--steps", "45", "--interval", "10"]);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stdout).toMatch(/resumed from step 29 in .*\(loss then \d+\.\d+\)/);
    expect(second.stdout).toContain("checkpoints kept: 30, 40, 44");
  });

  it("refuses bad arguments with a clear message", async () => {
    const run = await runTypeScript(demo, ["--steps", "zero"]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("--steps and --interval take positive integers");
  });
});
