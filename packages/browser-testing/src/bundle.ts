// Test pages' code bundled for the browser with esbuild, from TypeScript sources, in memory.
import { type Metafile, build } from "esbuild";

export interface BrowserBundleOptions {
  /** Output name ("page", "worker") → entry file; each becomes "/<name>.js". */
  readonly entryPoints: Readonly<Record<string, string>>;
  /** Values replaced at build time (esbuild `define`), e.g. `{ "globalThis.STEPS": "20" }`. */
  readonly define?: Readonly<Record<string, string>>;
  /** Minify (for size measurements); default false, so stack traces stay readable. */
  readonly minify?: boolean;
}

export interface BrowserBundle {
  /** "/page.js" → code (and "/page.js.map" when not minified). */
  readonly files: Readonly<Record<string, Uint8Array>>;
  /** The esbuild metafile: inputs and output sizes. */
  readonly metafile: Metafile;
}

/**
 * The export conditions a browser bundle resolves: workspace packages from their TypeScript
 * sources ("@cairn/source"), then each package's "browser" entry.
 */
export const BROWSER_CONDITIONS = ["@cairn/source", "browser", "module", "import", "default"] as const;

/** Bundles `entryPoints` as ES modules for `platform: "browser"`; a `node:` import fails the build. */
export async function bundleForBrowser(options: BrowserBundleOptions): Promise<BrowserBundle> {
  const result = await build({
    entryPoints: { ...options.entryPoints },
    bundle: true,
    format: "esm",
    platform: "browser",
    target: "es2022",
    conditions: [...BROWSER_CONDITIONS],
    define: { ...options.define },
    minify: options.minify ?? false,
    sourcemap: options.minify ? false : "linked",
    write: false,
    outdir: "/",
    metafile: true,
    logLevel: "silent",
  });
  const files: Record<string, Uint8Array> = {};
  for (const file of result.outputFiles) files[file.path] = file.contents;
  return { files, metafile: result.metafile };
}
