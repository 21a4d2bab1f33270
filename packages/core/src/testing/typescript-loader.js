// `node --import` entry of spawnTypeScript's children: registers typescript-hooks.js, in-thread
// where Node has module.registerHooks (22.15+), else on module.register's loader thread (Node 20).
// Where tsx is loaded too (cairn-run adds it for a rank on Node 20) it is left to run TypeScript alone.
import * as module from "node:module";
import process from "node:process";
import * as hooks from "./typescript-hooks.js";

if (!process.execArgv.some((arg) => arg.includes("tsx"))) {
  if (typeof module.registerHooks === "function") module.registerHooks(hooks);
  else module.register("./typescript-hooks.js", import.meta.url);
}
// Stack traces name the TypeScript lines, as under tsx.
process.setSourceMapsEnabled(true);
