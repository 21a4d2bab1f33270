// Plain paths, which mean file://, Node's side (the browser build gets local-path.browser.ts).
import { realpath } from "node:fs/promises";
import { basename, dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/** The file:// URL of a plain path, relative ones resolved against the working directory. */
export function fileUrlOfPath(path: string): URL {
  return pathToFileURL(isAbsolute(path) ? path : resolve(path));
}

/** The real path of a file:// URL: its longest existing ancestor resolved (symlinks, `..`), the rest appended. */
export async function realFilePath(url: URL): Promise<string> {
  return realPath(fileURLToPath(url));
}

async function realPath(path: string): Promise<string> {
  const absolute = resolve(path);
  try {
    return await realpath(absolute);
  } catch {
    const parent = dirname(absolute);
    return parent === absolute ? absolute : join(await realPath(parent), basename(absolute));
  }
}
