// Bundles the `cairn ui` page with esbuild: at build time into dist/page/ (the package ships those
// files), and in memory when `cairn ui` runs from the repository's sources. Run as a script:
//   node --import tsx page/build.ts <outdir>
import { readFile, mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { build } from "esbuild";

const HERE = fileURLToPath(new URL(".", import.meta.url));

/** The page's files by name: index.html, page.js (Preact, uPlot and the page, minified) and page.css. */
export async function bundlePage(): Promise<Record<string, Uint8Array>> {
  const result = await build({
    entryPoints: { page: join(HERE, "main.tsx") },
    bundle: true,
    format: "esm",
    platform: "browser",
    target: "es2022",
    jsx: "automatic",
    jsxImportSource: "preact",
    minify: true,
    legalComments: "eof",
    write: false,
    outdir: "/",
    logLevel: "silent",
  });
  const files: Record<string, Uint8Array> = { "index.html": await readFile(join(HERE, "index.html")) };
  for (const file of result.outputFiles) files[file.path.slice(1)] = file.contents;
  return files;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const out = process.argv[2];
  if (!out) throw new Error("usage: node --import tsx page/build.ts <outdir>");
  await mkdir(out, { recursive: true });
  for (const [name, bytes] of Object.entries(await bundlePage())) await writeFile(join(out, name), bytes);
}
