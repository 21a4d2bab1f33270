import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { runTypeScript } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";

const example = fileURLToPath(new URL("./quickstart-fit.ts", import.meta.url));
let dir: string | undefined;
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("the README's model.fit example", () => {
  it(
    "trains 20 epochs, checkpointing each; a second run trains nothing and says so",
    { timeout: 120_000 },
    async () => {
      dir = await mkdtemp(join(tmpdir(), "cairn-quickstart-fit-"));
      const first = await runTypeScript(example, [], { cwd: dir });
      expect(first.code, first.stderr).toBe(0);
      // 460 training samples in batches of 32: 15 batches an epoch.
      expect(first.stdout).toBe(
        `trained epochs ${Array.from({ length: 20 }, (_, i) => i).join(", ")}; newest step 300\n`,
      );
      const second = await runTypeScript(example, [], { cwd: dir });
      expect(second.code, second.stderr).toBe(0);
      expect(second.stdout).toMatch(
        /^training under fit-checkpoints already finished step 300 \(20 of 20 epochs done\): nothing to train; the model holds that step\ntrained epochs none; newest step 300\n$/,
      );
    },
  );

  it("is the code the README shows, line for line, at most 15 of them", async () => {
    const readme = await readFile(fileURLToPath(new URL("../../README.md", import.meta.url)), "utf8");
    const shown = /### With model\.fit[\s\S]*?```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    const source = (await readFile(example, "utf8")).split("\n").slice(2).join("\n");
    expect(shown).toBe(source);
    expect(source.trimEnd().split("\n").length).toBeLessThanOrEqual(15);
  });
});
