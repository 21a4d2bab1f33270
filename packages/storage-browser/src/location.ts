import { CheckpointError } from "@cairn/core";
import { redactUrl } from "@cairn/core/storage";

/**
 * The names an `opfs://name/a/b` or `idb://db/a/b` URL's host and path decode to, each one plain
 * name (no "/", ".", "..", NUL), so no two spellings reach one place. The host comes first: the
 * OPFS directory under the origin's root, or the IndexedDB database.
 */
export function locationNames(protocol: string, url: URL): string[] {
  const invalid = (what: string, cause?: unknown): CheckpointError =>
    new CheckpointError("invalid_argument", `[${protocol}] ${redactUrl(url)}: ${what}`, {
      cause,
      context: { path: redactUrl(url), protocol },
    });
  if (url.search || url.hash)
    throw invalid(`a ${protocol}:// URL has no query or fragment; write "?" as %3F and "#" as %23`);
  if (!url.host)
    throw invalid(
      `a ${protocol}:// URL names its ${protocol === "idb" ? "database" : "directory"} first: ${protocol}://<name>/<path>`,
    );
  const names: string[] = [];
  for (const segment of [url.host, ...url.pathname.split("/")]) {
    if (segment === "") continue;
    let name: string;
    try {
      name = decodeURIComponent(segment);
    } catch (error) {
      throw invalid(`"${segment}" is not valid percent-encoding; write "%" as %25`, error);
    }
    if (name.includes("/") || name.includes("\\") || name.includes("\0") || name === "." || name === "..")
      throw invalid(`the segment "${segment}" is not a plain name; separate names with "/" and leave out "." and ".."`);
    names.push(name);
  }
  return names;
}

/** A browser storage failure as a CheckpointError: DOMException names mapped to codes, the exception kept as cause. */
export function browserStorageError(protocol: string, path: string, action: string, error: unknown): CheckpointError {
  if (error instanceof CheckpointError) return error;
  const name = (error as { name?: unknown })?.name;
  const message = (error as { message?: unknown })?.message;
  const context = { path, protocol };
  if (name === "NotFoundError" || name === "TypeMismatchError")
    return new CheckpointError("not_found", `[${protocol}] ${path} does not exist`, { cause: error, context });
  if (name === "QuotaExceededError")
    return new CheckpointError(
      "storage",
      `[${protocol}] ${action} ${path}: the origin's storage quota is used up; delete old steps or ask for persistent storage (navigator.storage.persist())`,
      { cause: error, context: { ...context, transient: false } },
    );
  // Another tab or worker holds the file (a sync access handle), or the file changed under a read: worth a retry.
  const transient =
    name === "NoModificationAllowedError" || name === "InvalidStateError" || name === "NotReadableError";
  return new CheckpointError("storage", `[${protocol}] ${action} ${path} failed: ${String(name)}: ${String(message)}`, {
    cause: error,
    context: { ...context, transient },
  });
}
