// Issue 37's bundle size: the browser build of core, manager and storage-browser (esbuild, platform
// browser, ESM, minified, es2022: what bundleForBrowser makes) against tfjs-core's own browser build
// made the same way in the same run, minified and gzipped bytes, per package and for the three.
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import { bundleForBrowser } from "@cairn/browser-testing";
import { report } from "../report.js";

const suite = "bundle";
const entry = (name: string): string => fileURLToPath(new URL(`../bundle/${name}.ts`, import.meta.url));

interface Size {
  readonly minified: number;
  readonly gzip: number;
  /** The largest contributors to the minified output, by package: "hash-wasm 217 KB, Cairn 171 KB". */
  readonly parts: string;
}

/** The package a bundled input belongs to: a dependency by its name, a workspace package as "Cairn". */
function packageOf(input: string): string {
  const dependency = /node_modules\/(?:\.pnpm\/[^/]+\/node_modules\/)?((?:@[^/]+\/)?[^/]+)/.exec(input);
  if (dependency) return dependency[1]!.startsWith("@cairn/") ? "Cairn" : dependency[1]!;
  return input.startsWith("packages/") || input.includes("/packages/") ? "Cairn" : input;
}

async function size(name: string): Promise<Size> {
  const bundle = await bundleForBrowser({ entryPoints: { [name]: entry(name) }, minify: true });
  const code = bundle.files[`/${name}.js`];
  if (!code) throw new Error(`esbuild wrote no /${name}.js`);
  const byPackage = new Map<string, number>();
  for (const output of Object.values(bundle.metafile.outputs)) {
    for (const [input, { bytesInOutput }] of Object.entries(output.inputs)) {
      const owner = packageOf(input);
      byPackage.set(owner, (byPackage.get(owner) ?? 0) + bytesInOutput);
    }
  }
  const parts = [...byPackage]
    .filter(([, bytes]) => bytes >= 500)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 5)
    .map(([owner, bytes]) => `${owner} ${Math.round(bytes / 1000)} KB`)
    .join(", ");
  // gzip at zlib's default level (6), what a web server's on-the-fly compression usually uses.
  return { minified: code.byteLength, gzip: gzipSync(code).byteLength, parts };
}

const baseline = await size("tfjs-core");
const rows: [string, string][] = [
  ["core", "@cairn/core"],
  ["manager", "@cairn/manager and what it imports"],
  ["storage-browser", "@cairn/storage-browser and what it imports"],
  ["cairn", "core + manager + storage-browser"],
];
for (const [name, label] of rows) {
  const cairn = await size(name);
  for (const form of ["minified", "gzip"] as const) {
    report({
      suite,
      name: `browser bundle, ${label}, ${form}`,
      value: cairn[form] / 1000,
      unit: "KB",
      baseline: { name: `tfjs-core's browser bundle, built the same way, ${form}`, value: baseline[form] / 1000 },
      ratio: cairn[form] / baseline[form],
      better: "lower",
      extra: { largest: cairn.parts, baselineLargest: baseline.parts, esbuild: "platform browser, esm, es2022" },
    });
  }
}
