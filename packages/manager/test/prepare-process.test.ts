import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { runTypeScript } from "@cairn/core/testing";
import { expect, it } from "vitest";

const child = fileURLToPath(new URL("./fixtures/prepare-child.ts", import.meta.url));

it("prepare() right after construction settles, and the process then exits", async () => {
  const dir = await mkdtemp(join(tmpdir(), "cairn-prepare-process-"));
  try {
    for (let i = 0; i < 3; i++) {
      const run = await runTypeScript(child, [`file://${dir}/run`]);
      expect({ code: run.code, stdout: run.stdout.trim() }).toEqual({ code: 0, stdout: "prepared" });
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  // Three child processes, each loading the manager through tsx: seconds on a loaded CI machine.
}, 60_000);
