// A page under test: a TypeScript entry bundled for the browser, served from 127.0.0.1, opened in
// a ChromiumSession; the test calls the functions the entry exposes (`exposeToTests`, ./page).
import type { Page } from "playwright-core";
import { type BrowserBundle, bundleForBrowser } from "./bundle.js";
import type { ChromiumSession } from "./chromium.js";
import { type StaticServer, type StaticServerOptions, serveStatic } from "./static-server.js";

export interface TestPageServerOptions extends Omit<StaticServerOptions, "files"> {
  /** The page's module: it calls `exposeToTests({...})` from "@cairn/browser-testing/page". */
  readonly entry: string;
  /** More bundles served beside it ("worker" → "/worker.js"). */
  readonly extraEntryPoints?: Readonly<Record<string, string>>;
  /** esbuild `define` for the bundles. */
  readonly define?: Readonly<Record<string, string>>;
  /** More static files ("/fixture.bin" → bytes). */
  readonly files?: StaticServerOptions["files"];
  /** Body of index.html; default: an empty page that loads /page.js as a module. */
  readonly html?: string;
}

export interface TestPageServer {
  /** The page's URL ("http://127.0.0.1:PORT/"). */
  readonly url: string;
  readonly server: StaticServer;
  readonly bundle: BrowserBundle;
  close(): Promise<void>;
}

const DEFAULT_HTML =
  '<!doctype html><meta charset="utf-8"><title>cairn test page</title><script type="module" src="/page.js"></script>';

/** Bundles the entry (as /page.js) and serves it with an index.html; a secure context, since 127.0.0.1 is trusted. */
export async function serveTestPage(options: TestPageServerOptions): Promise<TestPageServer> {
  const bundle = await bundleForBrowser({
    entryPoints: { page: options.entry, ...options.extraEntryPoints },
    ...(options.define ? { define: options.define } : {}),
  });
  const server = await serveStatic({
    ...options,
    files: { "/index.html": options.html ?? DEFAULT_HTML, ...bundle.files, ...options.files },
  });
  return { url: `${server.origin}/`, server, bundle, close: () => server.close() };
}

export interface TestPage {
  readonly page: Page;
  /** Calls a function the page exposed, with JSON-like arguments; resolves its (JSON-like) result. */
  call<T = unknown>(name: string, ...args: unknown[]): Promise<T>;
  /** Reloads the page and waits until it has exposed its functions again. */
  reload(): Promise<void>;
  /** Uncaught errors and console errors of the page so far. */
  readonly errors: readonly string[];
  close(): Promise<void>;
}

const READY = "__cairnTestReady";
const FUNCTIONS = "__cairnTestFunctions";

/** Opens `url` in a new tab of `session` and waits until the page called `exposeToTests`. */
export async function openTestPage(
  session: ChromiumSession,
  url: string,
  options: { readonly timeoutMs?: number } = {},
): Promise<TestPage> {
  const timeout = options.timeoutMs ?? 60_000;
  const page = await session.newPage();
  const errors: string[] = [];
  page.on("pageerror", (error) => errors.push(`${error.name}: ${error.message}`));
  page.on("console", (message) => {
    if (message.type() === "error") errors.push(message.text());
  });
  const ready = async (): Promise<void> => {
    try {
      await page.waitForFunction((flag) => (globalThis as Record<string, unknown>)[flag] === true, READY, { timeout });
    } catch (error) {
      throw new Error(`the page did not call exposeToTests (${errors.join("; ") || "no error reported"})`, {
        cause: error,
      });
    }
  };
  await page.goto(url, { timeout });
  await ready();
  return {
    page,
    errors,
    async call<T>(name: string, ...args: unknown[]): Promise<T> {
      return (await page.evaluate(
        ([key, fn, list]) => {
          const functions = (globalThis as Record<string, unknown>)[key] as Record<
            string,
            (...a: unknown[]) => unknown
          >;
          const target = functions[fn];
          if (typeof target !== "function") throw new Error(`the page exposes no function ${fn}`);
          return target(...list);
        },
        [FUNCTIONS, name, args] as const,
      )) as T;
    },
    async reload() {
      await page.reload({ timeout });
      await ready();
    },
    close: () => page.close(),
  };
}
