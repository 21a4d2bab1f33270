import { CheckpointError } from "@cairn/core";
import { urlNames } from "@cairn/core/storage";

/**
 * The names an `opfs://name/a/b` or `idb://db/a/b` URL's host and path decode to, each one plain
 * name (core's `urlNames`). The host comes first: the OPFS directory under the origin's root, or
 * the IndexedDB database.
 */
export function locationNames(protocol: "opfs" | "idb", url: URL): string[] {
  return urlNames(protocol, url, protocol === "idb" ? "database" : "directory");
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
