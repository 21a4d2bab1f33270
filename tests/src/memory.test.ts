import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { runTypeScript } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { tempDir } from "./helpers.js";

const child = fileURLToPath(new URL("./fixtures/memory-child.ts", import.meta.url));
const MiB = 1 << 20;

async function measure(mode: "save" | "load", dir: string): Promise<{ bytes: number; baseline: number; peak: number }> {
  const run = await runTypeScript(child, [mode, dir]);
  expect(run.code, run.stderr).toBe(0);
  return JSON.parse(run.stdout) as { bytes: number; baseline: number; peak: number };
}

describe("memory of a 300 MiB state dict (peak RSS, measured in a child process)", () => {
  it("save streams and load reads in bounded pieces: peak stays within the state dict + 256 MiB", async () => {
    const dir = join(await tempDir(), "ckpt");
    const saved = await measure("save", dir);
    expect(saved.bytes).toBeGreaterThan(300 * MiB);
    expect(saved.peak, `save peak ${Math.round(saved.peak / MiB)} MiB`).toBeLessThanOrEqual(saved.bytes + 256 * MiB);
    const loaded = await measure("load", dir);
    expect(loaded.peak, `load peak ${Math.round(loaded.peak / MiB)} MiB`).toBeLessThanOrEqual(loaded.bytes + 256 * MiB);
    console.log(
      `300 MiB state dict: save peak RSS ${Math.round(saved.peak / MiB)} MiB (baseline ${Math.round(saved.baseline / MiB)} MiB), load peak RSS ${Math.round(loaded.peak / MiB)} MiB (baseline ${Math.round(loaded.baseline / MiB)} MiB)`,
    );
  });
});
