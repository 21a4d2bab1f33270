#!/usr/bin/env node
// The `cairn` command. Installed as a dependency it runs the built `dist/`. In a checkout of the
// repository, where the TypeScript sources sit beside this bin, it runs them in this process with
// tsx's loader plus a resolve hook adding the "@cairn/source" export condition, so no build is needed.
import { existsSync } from "node:fs";
import { register } from "node:module";
import process from "node:process";
import { URL } from "node:url";

async function sourceEntry() {
  let api;
  try {
    api = import.meta.resolve("tsx/esm/api");
  } catch (error) {
    throw new Error(
      "cairn: this is a checkout of the repository, and tsx, which runs its TypeScript sources, is not installed. Run `pnpm install` at its root.",
      { cause: error },
    );
  }
  register("./source-condition.js", import.meta.url);
  (await import(api)).register();
  return import("../src/main.ts");
}

const sources = new URL("../src/main.ts", import.meta.url);
const entry = existsSync(sources) ? await sourceEntry() : await import("../dist/main.js");
process.exitCode = await entry.runCli(process.argv.slice(2));
