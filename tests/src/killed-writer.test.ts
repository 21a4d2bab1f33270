// Issue 30, item 10: what a SIGKILLed save leaves (its temp files mid-write) is listed, shown by
// `cairn ls`, and swept by age by the manager and by `cairn gc`, never younger than the age given.
import { cp, readdir } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { CheckpointError, openStorage } from "@cairn/core";
const TEMP_OBJECT_PREFIX = ".cairn-tmp-";
import { killTypeScript } from "@cairn/core/testing";
import { CheckpointManager } from "@cairn/manager";
import { runCli } from "@cairn/cli";
import { describe, expect, it } from "vitest";
import { tempDir } from "./helpers.js";

const CHILD = fileURLToPath(new URL("./fixtures/killed-writer-child.ts", import.meta.url));
const DAY = 24 * 3600_000;

/** Runs the writer child under `root` and SIGKILLs it while it writes step 2's data files. */
const killMidWrite = (root: string): Promise<void> => killTypeScript(CHILD, [root], { after: "writing" });

async function cairn(args: string[]): Promise<{ code: number; stdout: string }> {
  let stdout = "";
  const code = await runCli(args, { stdout: { write: (t: string) => (stdout += t) }, stderr: { write: () => true } });
  return { code, stdout };
}

const filesOf = (root: string, step: number): Promise<string[]> =>
  readdir(join(root, String(step))).catch(() => [] as string[]);

describe("a save SIGKILLed mid-write", () => {
  it("leaves temp files that are listed, shown by cairn ls, and swept by age by the manager and cairn gc", async () => {
    const dir = await tempDir();
    const root = join(dir, "killed");
    await killMidWrite(root);
    const left = await filesOf(root, 2);
    expect(
      left.some((f) => f.startsWith(`${TEMP_OBJECT_PREFIX}data-`)),
      left.join(", "),
    ).toBe(true);
    // One killed root for each sweeper.
    const [young, aged, zero, gc] = [join(dir, "young"), join(dir, "aged"), join(dir, "zero"), join(dir, "gc")];
    for (const copy of [young, aged, zero, gc]) await cp(root, copy, { recursive: true, preserveTimestamps: true });

    const storage = await openStorage(root);
    const listed: string[] = [];
    for await (const object of storage.list("2/")) listed.push(object.path);
    expect(listed.sort()).toEqual(left.map((f) => `2/${f}`).sort());
    const ls = await cairn(["ls", root, "--json"]);
    expect(ls.code).toBe(0);
    expect(JSON.parse(ls.stdout)).toMatchObject({
      steps: [
        expect.objectContaining({ step: 1, committed: true }),
        expect.objectContaining({ step: 2, committed: false }),
      ],
    });

    // Younger than leftoverAgeMs: the writer may be alive, so it stays.
    const keeps = new CheckpointManager(young, 1, { checkpointOnPreemption: false });
    expect(await keeps.latestStep()).toBe(1);
    await keeps.save(3, { n: 3 });
    await keeps.close();
    expect(await filesOf(young, 2)).toEqual(left);
    for (const [at, options] of [
      [aged, { now: () => Date.now() + DAY + 60_000 }],
      [zero, { leftoverAgeMs: 0 }],
    ] as const) {
      const mgr = new CheckpointManager(at, 1, { checkpointOnPreemption: false, ...options });
      // The usual resume: the listing that finds the latest step finds the leftover too.
      expect(await mgr.latestStep()).toBe(1);
      await mgr.save(3, { n: 3 });
      await mgr.close();
      expect(await readdir(at)).toEqual(["1", "3"]);
      expect(await new CheckpointManager(at, 1, { readOnly: true }).allSteps()).toEqual([1, 3]);
    }
    expect((await cairn(["gc", gc, "--leftover-age", "1h"])).code).toBe(0);
    expect(await filesOf(gc, 2)).toEqual(left);
    const swept = await cairn(["gc", gc, "--leftover-age", "0", "--json"]);
    expect(swept.code).toBe(0);
    expect(JSON.parse(swept.stdout)).toMatchObject({ deletedLeftovers: [2] });
    expect(await readdir(gc)).toEqual(["1"]);
  });

  it("takes leftoverAgeMs 0, as cairn gc takes --leftover-age 0, and refuses a negative one", () => {
    expect(() => new CheckpointManager("memory://killed-writer/a", 1, { leftoverAgeMs: -1 })).toThrow(CheckpointError);
    expect(() => new CheckpointManager("memory://killed-writer/b", 1, { leftoverAgeMs: 0 })).not.toThrow();
  });
});
