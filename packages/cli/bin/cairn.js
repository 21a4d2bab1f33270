#!/usr/bin/env node
// The `cairn` command. In the repository (tsx installed beside this package), it runs the
// TypeScript sources in this process: tsx's loader plus a resolve hook adding the
// "@cairn/source" export condition, exactly what `spawnTypeScript` and vitest do, so no build
// is needed. A published install without tsx runs the built `dist/`.
import { register } from "node:module";
import process from "node:process";

function tsxApi() {
  try {
    return import.meta.resolve("tsx/esm/api");
  } catch {
    return undefined;
  }
}

const api = tsxApi();
let entry;
if (api) {
  register("./source-condition.js", import.meta.url);
  const { register: registerTsx } = await import(api);
  registerTsx();
  entry = await import("../src/main.ts");
} else {
  entry = await import("../dist/main.js");
}
process.exitCode = await entry.runCli(process.argv.slice(2));
