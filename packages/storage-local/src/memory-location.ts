// What a memory:// URL names, decoded the same way in Node (a memfs directory) and in a page (a
// key prefix): no node: import, so both builds share it.
import { CheckpointError } from "@cairn/core";
import { redactUrl } from "@cairn/core/storage";

export function invalidUrl(protocol: string, url: URL, what: string, cause?: unknown): CheckpointError {
  return new CheckpointError("invalid_argument", `[${protocol}] ${redactUrl(url)}: ${what}`, {
    cause,
    context: { path: redactUrl(url), protocol },
  });
}

/** A query or fragment names nothing in a path: dropping it silently would point two different URLs at one directory. */
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
 * The names a `memory://name/a/b` URL decodes to (`["name", "a", "b"]`). Each segment is decoded
 * on its own and must stay one name, so no two spellings (`%2F`, `..%2F`) reach one place.
 */
export function memoryNames(url: URL): string[] {
  refuseQueryAndFragment("memory", url);
  if (!url.host)
    throw invalidUrl("memory", url, "a memory:// URL names its volume first; write memory://<name>/<path>");
  const names: string[] = [];
  for (const segment of [url.host, ...url.pathname.split("/")]) {
    if (segment === "") continue;
    let name: string;
    try {
      name = decodeURIComponent(segment);
    } catch (error) {
      throw invalidUrl("memory", url, `"${segment}" is not valid percent-encoding; write "%" as %25`, error);
    }
    if (name.includes("/") || name.includes("\0") || name === "." || name === "..") {
      throw invalidUrl(
        "memory",
        url,
        `the segment "${segment}" is not a plain name (it decodes to ${JSON.stringify(name)}); separate names with a plain "/" and leave out "." and ".."`,
      );
    }
    names.push(name);
  }
  return names;
}
