import { CheckpointError } from "../errors.js";
import { redactUrl } from "./storage-registry.js";

/** `invalid_argument` for a storage URL: `[<protocol>] <url, credentials redacted>: <what>`. */
export function invalidUrl(protocol: string, url: URL, what: string, cause?: unknown): CheckpointError {
  return new CheckpointError("invalid_argument", `[${protocol}] ${redactUrl(url)}: ${what}`, {
    cause,
    context: { path: redactUrl(url), protocol },
  });
}

/** A query or fragment names nothing in a path: dropping it silently would point two different URLs at one place. */
export function refuseQueryAndFragment(protocol: string, url: URL): void {
  if (url.search || url.hash) {
    const extra = url.search ? `query "${url.search}"` : `fragment "${url.hash}"`;
    throw invalidUrl(
      protocol,
      url,
      `a ${protocol}:// URL has no ${extra}; write "?" as %3F and "#" as %23 where a name holds them`,
    );
  }
}

/**
 * The names a `<protocol>://<name>/<path>` URL's host and path segments decode to, host first.
 * Each segment is decoded on its own and must stay one plain name (no "/", "\", NUL, "." or ".."),
 * so no two spellings (`%2F`, `..%2F`) reach one place. `first` says what the host names (a
 * volume, a directory, a database). Anything else is `invalid_argument`, naming what to write.
 */
export function urlNames(protocol: string, url: URL, first: string): string[] {
  refuseQueryAndFragment(protocol, url);
  if (!url.host)
    throw invalidUrl(protocol, url, `a ${protocol}:// URL names its ${first} first; write ${protocol}://<name>/<path>`);
  const names: string[] = [];
  for (const segment of [url.host, ...url.pathname.split("/")]) {
    if (segment === "") continue;
    let name: string;
    try {
      name = decodeURIComponent(segment);
    } catch (error) {
      throw invalidUrl(protocol, url, `"${segment}" is not valid percent-encoding; write "%" as %25`, error);
    }
    if (/[/\\\0]/.test(name) || name === "." || name === "..") {
      throw invalidUrl(
        protocol,
        url,
        `the segment "${segment}" is not a plain name (it decodes to ${JSON.stringify(name)}); separate names with a plain "/" and leave out "." and ".."`,
      );
    }
    names.push(name);
  }
  return names;
}
