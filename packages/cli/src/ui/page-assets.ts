import { readFile } from "node:fs/promises";

/** A file of the page, ready to send. */
export interface PageFile {
  readonly body: Uint8Array;
  readonly type: string;
}

const TYPES: Readonly<Record<string, string>> = {
  "index.html": "text/html; charset=utf-8",
  "page.js": "text/javascript; charset=utf-8",
  "page.css": "text/css; charset=utf-8",
};

let loaded: Promise<ReadonlyMap<string, PageFile>> | undefined;

/**
 * The page's static files. An installed package ships them in dist/page/, bundled at build
 * time; run from the repository's sources (as the bin does in a checkout, and the tests), the
 * page is bundled in memory once per process by the same build (packages/cli/page/build.ts).
 */
export function pageFiles(): Promise<ReadonlyMap<string, PageFile>> {
  loaded ??= (async () => {
    let files: Record<string, Uint8Array>;
    if (import.meta.url.endsWith(".ts")) {
      // A path the TypeScript build does not follow: the bundler is a development dependency.
      const build = new URL("../../page/build.ts", import.meta.url).href;
      files = await ((await import(build)) as { bundlePage(): Promise<Record<string, Uint8Array>> }).bundlePage();
    } else {
      const names = Object.keys(TYPES);
      const bodies = await Promise.all(names.map((name) => readFile(new URL(`../page/${name}`, import.meta.url))));
      files = Object.fromEntries(names.map((name, i) => [name, bodies[i]!]));
    }
    return new Map(
      Object.entries(TYPES).map(([name, type]) => {
        const body = files[name];
        if (!body) throw new Error(`cairn ui: the page's ${name} is missing from its bundle`);
        return [name, { body, type }];
      }),
    );
  })();
  loaded.catch(() => (loaded = undefined));
  return loaded;
}
