// Module hooks that run the workspace's TypeScript in test children (spawnTypeScript): a relative
// `./x.js` written in a .ts file finds `./x.ts`, and a .ts file loads as esbuild's transform of it,
// kept in a cache keyed by its path and content, so a child compiles nothing that an earlier child did.
// The same functions serve module.registerHooks (in-thread, Node 22.15+) and module.register.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import process from "node:process";
import { URL, fileURLToPath } from "node:url";

// Bump when the transform's options change: the cache is keyed by this, the file's path (its
// inline source map names it) and its content.
const VERSION = "2";
const CACHE = fileURLToPath(new URL("../../node_modules/.cache/cairn-typescript/", import.meta.url));
const TYPESCRIPT = /\.(ts|mts|tsx)$/;
// This Node's syntax: a checkout run on Node 24 and then on 20 must not reuse 24's output.
const TARGET = `node${process.versions.node.split(".")[0]}`;
// The tsconfig settings that change what esbuild emits (tsconfig.base.json).
const tsconfigRaw = {
  compilerOptions: {
    verbatimModuleSyntax: true,
    useDefineForClassFields: true,
    jsx: "react-jsx",
    jsxImportSource: "preact",
  },
};
let esbuild;

export function resolve(specifier, context, nextResolve) {
  if (context.parentURL && TYPESCRIPT.test(context.parentURL) && /^\.\.?\/.*\.(js|mjs|jsx)$/.test(specifier)) {
    const written = new URL(specifier, context.parentURL);
    const source = new URL(written.href.replace(/\.(m?)js(x?)$/, (_, m, x) => `.${m}ts${x}`));
    if (!existsSync(written) && existsSync(source)) return { url: source.href, format: "module", shortCircuit: true };
  }
  return nextResolve(specifier, context);
}

export function load(url, context, nextLoad) {
  if (!url.startsWith("file:") || !TYPESCRIPT.test(url)) return nextLoad(url, context);
  return { format: "module", source: compiled(fileURLToPath(url)), shortCircuit: true };
}

/** Core's esbuild, else tsx's (a checkout not yet re-installed since core listed esbuild). */
function loadEsbuild() {
  const require = createRequire(import.meta.url);
  try {
    return require("esbuild");
  } catch {
    return createRequire(require.resolve("tsx/package.json"))("esbuild");
  }
}

/** The JavaScript of a TypeScript file: from the cache, or transformed and cached (written whole, then renamed). */
function compiled(path) {
  const text = readFileSync(path, "utf8");
  const key = createHash("sha256").update(`${VERSION}\0${TARGET}\0${path}\0${text}`).digest("hex");
  const cached = `${CACHE}${key}.js`;
  try {
    return readFileSync(cached, "utf8");
  } catch {
    // Not compiled yet.
  }
  esbuild ??= loadEsbuild();
  const { code } = esbuild.transformSync(text, {
    loader: path.endsWith(".tsx") ? "tsx" : "ts",
    format: "esm",
    target: TARGET,
    sourcefile: path,
    sourcemap: "inline",
    tsconfigRaw,
  });
  mkdirSync(CACHE, { recursive: true });
  const partial = `${cached}.${process.pid}.${Math.random().toString(36).slice(2)}`;
  writeFileSync(partial, code);
  renameSync(partial, cached);
  return code;
}
