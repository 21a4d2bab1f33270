import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { runTypeScript, spawnTypeScript } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";

const demo = fileURLToPath(new URL("./train.ts", import.meta.url));
let dir: string;
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("preemption, end to end", () => {
  it("SIGTERM at a random step: the run commits a checkpoint at the next step, exits 0, and a restart resumes it with identical weights", { timeout: 120_000 }, async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-preempt-"));
    const path = join(dir, "ckpt");
    const child = spawnTypeScript(demo, ["--path", path, "--steps", "1000000", "--interval", "25"]);
    let stdout = "";
    let stderr = "";
    child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    // Wait for training to be under way, then a random while longer, then preempt.
    await new Promise<void>((resolve, reject) => {
      child.stdout?.on("data", (d: Buffer) => {
        stdout += d.toString();
        if (stdout.includes("step 25:")) resolve();
      });
      void exited.then((code) => reject(new Error(`the demo exited early (${code}): ${stderr}`)));
    });
    await new Promise((r) => setTimeout(r, 50 + Math.floor(Math.random() * 500)));
    child.kill("SIGTERM");
    expect(await exited, stderr).toBe(0);
    const stopped = /preempted: checkpoint committed at step (\d+), weights crc ([0-9a-f]{8})/.exec(stdout);
    expect(stopped, stdout).not.toBeNull();
    const [, step, crc] = stopped!;
    expect(stdout).toContain("preemption notice (received SIGTERM)");

    const resumed = await runTypeScript(demo, ["--path", path, "--steps", String(Number(step) + 1), "--interval", "25"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stdout).toMatch(new RegExp(`resumed from step ${step} in .*weights crc ${crc}`));
  });
});
