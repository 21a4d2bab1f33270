import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { hostTensor, save } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { type CliRun, cairnProcess, pattern, tempDir } from "./helpers.js";

/** The bin with stdout and stderr piped, in an environment of exactly the variables named (plus PATH). */
function cairnWithEnv(args: readonly string[], env: Record<string, string>): Promise<CliRun> {
  return cairnProcess(args, { env: { PATH: process.env.PATH ?? "", ...env } });
}

describe("the CLI's output in logs and pipes", () => {
  it("piped, it prints only results: no progress bar, no escape codes, nothing on stderr, with or without NO_COLOR", async () => {
    const dir = join(await tempDir(), "ckpt");
    const w = hostTensor("float32", [1024, 1024]);
    new Uint8Array(w.data.buffer).set(pattern(w.data.byteLength, 3));
    await save({ w, step: 1 }, dir);
    for (const env of [{}, { NO_COLOR: "1" }, { TERM: "xterm-256color", CI: "true" }] as Record<string, string>[]) {
      const copy = join(await tempDir(), "copy");
      const run = await cairnWithEnv(["cp", dir, copy, "--then", "verify", copy, "--then", "ls", copy], env);
      expect(run.code, run.stderr).toBe(0);
      expect(run.stderr).toBe("");
      expect(run.stdout).toContain("verified");
      expect(run.stdout).not.toContain("\x1b");
      expect(run.stdout).not.toContain("\r");
    }
  });

  it("a failure is one line; --verbose or DEBUG=cairn adds its context, causes and stack", async () => {
    const dir = join(await tempDir(), "broken");
    await mkdir(dir);
    await writeFile(join(dir, "metadata.json"), '{"version":');
    const oneLine = /^cairn inspect: .*metadata\.json: not valid JSON; the checkpoint cannot be read\n$/;
    for (const env of [{}, { DEBUG: "express,other" }] as Record<string, string>[]) {
      const run = await cairnWithEnv(["inspect", dir], env);
      expect(run.code).toBe(3);
      expect(run.stderr).toMatch(oneLine);
    }
    for (const [args, env] of [
      [["--verbose"], {}],
      [[], { DEBUG: "cairn" }],
      [[], { DEBUG: "other,cairn:*" }],
    ] as [string[], Record<string, string>][]) {
      const run = await cairnWithEnv(["inspect", dir, ...args], env);
      expect(run.code).toBe(3);
      const [first, ...detail] = run.stderr.split("\n");
      expect(`${first}\n`).toMatch(oneLine);
      expect(detail.join("\n")).toMatch(/code: 'corrupt'[\s\S]*\[cause\]: \w*SyntaxError/);
      expect(run.stderr).not.toContain("\x1b");
    }
  });
});
