import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { runTypeScript, spawnTypeScript } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";

const example = fileURLToPath(new URL("./distributed.ts", import.meta.url));
const cairnRun = fileURLToPath(new URL("../../packages/distributed/src/cairn-run.ts", import.meta.url));
const dirs: string[] = [];
afterAll(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

describe("the distributed example under cairn-run", () => {
  it(
    "trains on 2 ranks, resumes on 3, and loads the latest step column-sharded under renamed keys",
    { timeout: 120_000 },
    async () => {
      const dir = await mkdtemp(join(tmpdir(), "cairn-dist-example-"));
      dirs.push(dir);
      const first = await runTypeScript(cairnRun, ["--nproc-per-node", "2", example, "--path", dir]);
      expect(first.code, first.stderr).toBe(0);
      expect(first.stdout).toContain("[rank 0] steps on");
      expect(first.stdout).toMatch(/steps on .*: 15, 20\n/);
      expect(first.stdout.match(/values correct/g)).toHaveLength(2);
      const second = await runTypeScript(cairnRun, ["--nproc-per-node", "3", example, "--path", dir, "--steps", "7"]);
      expect(second.code, second.stderr).toBe(0);
      expect(second.stdout).toContain("resumed from step 20");
      expect(second.stdout).toMatch(/steps on .*: 20, 25\n/);
      expect(second.stdout.match(/values correct/g)).toHaveLength(3);
    },
  );

  it(
    "a SIGTERM to cairn-run reaches every rank: all checkpoint at the same step and exit 0",
    { timeout: 120_000 },
    async () => {
      const dir = await mkdtemp(join(tmpdir(), "cairn-dist-example-"));
      dirs.push(dir);
      const child = spawnTypeScript(cairnRun, ["--nproc-per-node", "2", example, "--path", dir, "--steps", "100000"]);
      let stdout = "";
      const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
      // Once both ranks train (their managers now handle SIGTERM), let them run a little, then preempt.
      await new Promise<void>((resolve) => {
        child.stdout!.on("data", (d: Buffer) => {
          stdout += d.toString();
          if ((stdout.match(/training from step/g) ?? []).length === 2) resolve();
        });
      });
      await new Promise((r) => setTimeout(r, 300 + Math.floor(Math.random() * 700)));
      child.kill("SIGTERM");
      expect(await exited).toBe(0);
      const steps = [...stdout.matchAll(/\[rank (\d)\] preempted: checkpointed step (\d+)/g)].map((m) => Number(m[2]));
      expect(steps, stdout).toHaveLength(2);
      expect(steps[0]).toBe(steps[1]);
      expect(stdout).toMatch(new RegExp(`steps on .*${steps[0]}\\n`));
    },
  );
});
