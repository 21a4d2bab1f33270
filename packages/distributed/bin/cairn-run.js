#!/usr/bin/env node
// The `cairn-run` launcher. Installed as a dependency it runs the built `dist/`. In a checkout of
// the repository, where the TypeScript sources sit beside this bin, it runs them with tsx's loader
// plus a resolve hook adding the "@cairn/source" export condition, so no build is needed.
import { existsSync } from "node:fs";
import { register } from "node:module";
import { URL } from "node:url";

const sources = new URL("../src/cairn-run.ts", import.meta.url);
if (existsSync(sources)) {
  let api;
  try {
    api = import.meta.resolve("tsx/esm/api");
  } catch (error) {
    throw new Error(
      "cairn-run: this is a checkout of the repository, and tsx, which runs its TypeScript sources, is not installed. Run `pnpm install` at its root.",
      { cause: error },
    );
  }
  register("./source-condition.js", import.meta.url);
  (await import(api)).register();
  await import(sources.href);
} else {
  await import("../dist/cairn-run.js");
}
