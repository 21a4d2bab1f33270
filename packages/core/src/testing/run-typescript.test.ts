import { randomUUID } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { freshDirs } from "./fresh-dirs.js";
import { runTypeScript } from "./run-typescript.js";

const freshDir = freshDirs("cairn-run-typescript-");

describe("runTypeScript", () => {
  it("names each file in its stack traces, though two files' text is the same", async () => {
    const dir = await freshDir();
    // Unique per run, so the first child compiles it and the second finds the compiled text cached.
    const text = `// ${randomUUID()}\nconst fail = (why: string): never => {\n  throw new Error(why);\n};\nfail("from here");\n`;
    const first = join(dir, "first.ts");
    const second = join(dir, "second.ts");
    await writeFile(first, text);
    await writeFile(second, text);
    for (const script of [first, second]) {
      const run = await runTypeScript(script);
      expect(run.code).not.toBe(0);
      expect(run.stderr).toContain("from here");
      expect(run.stderr).toContain(`${script}:3`);
    }
  }, 60_000);
});
