// The browser build's graph (core, manager, storage adapters, through the "browser" condition)
// bundled by esbuild for platform "browser": a `node:` import anywhere fails the bundle, and a
// free Node global (Buffer, process, setImmediate, __dirname) fails the test.
import { fileURLToPath } from "node:url";
import { bundleForBrowser } from "@cairn/browser-testing";
import { describe, expect, it } from "vitest";

const EVERYTHING = fileURLToPath(new URL("./fixtures/browser/everything.ts", import.meta.url));
const NODE_GLOBALS = ["Buffer", "process", "setImmediate", "clearImmediate", "__dirname", "__filename"];
const SENTINEL = "__cairn_node_global_";

describe("the browser build", () => {
  it("imports no node: module and uses no Node global", { timeout: 120_000 }, async () => {
    const bundle = await bundleForBrowser({
      entryPoints: { everything: EVERYTHING },
      define: Object.fromEntries(NODE_GLOBALS.map((name) => [name, `${SENTINEL}${name}`])),
      minify: true,
    });
    const inputs = Object.keys(bundle.metafile.inputs);
    expect(inputs.filter((path) => path.startsWith("node:"))).toEqual([]);
    expect(inputs.some((path) => path.includes("core/src/format/crc32c-kernel.browser.ts"))).toBe(true);
    const code = new TextDecoder().decode(bundle.files["/everything.js"]);
    const used = [...new Set([...code.matchAll(new RegExp(`${SENTINEL}(\\w+)`, "g"))].map((m) => m[1]))];
    expect(used, "Node globals in the browser build").toEqual([]);
  });
});
