// A browser has no file paths: a location there is a URL (opfs://, idb://, https://, memory://).
import { CheckpointError } from "../errors.js";

export function fileUrlOfPath(path: string): URL {
  throw new CheckpointError(
    "invalid_argument",
    `${JSON.stringify(path)} is a file path, and a browser has none: use a URL such as opfs://run, idb://db/run or https://host/run`,
    { context: { path } },
  );
}

/** A file:// URL's path as written (no file system to resolve it against). */
export function realFilePath(url: URL): Promise<string> {
  return Promise.resolve(decodeURIComponent(url.pathname));
}
