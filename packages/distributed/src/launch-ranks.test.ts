import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const BIN = fileURLToPath(new URL("../bin/cairn-run.js", import.meta.url));
const SCRIPT = fileURLToPath(new URL("../test/fixtures/hello-rank.ts", import.meta.url));

describe("cairn-run", () => {
  it("runs a .ts script on every rank when started by plain node, without tsx in its flags (issue 30, item 11)", async () => {
    // As a user's `npx cairn-run train.ts` starts it: no loader options inherited from this test's runner.
    const { stdout } = await promisify(execFile)(process.execPath, [BIN, "--nproc-per-node", "2", SCRIPT], {
      env: { ...process.env, NODE_OPTIONS: "" },
    });
    const lines = stdout
      .split("\n")
      .filter((l) => l.includes("RESULT "))
      .map((l) => JSON.parse(l.slice(l.indexOf("RESULT ") + 7)) as unknown)
      .sort((a, b) => (a as { rank: number }).rank - (b as { rank: number }).rank);
    expect(lines).toEqual([
      { rank: 0, worldSize: 2 },
      { rank: 1, worldSize: 2 },
    ]);
  }, 60_000);
});
