import { CheckpointError } from "@cairn/core";
import { type StorageOperation, alreadyExists, errnoCode, notFound } from "@cairn/core/storage";

/** What the adapter was doing when a file system call failed. */
export type FsAction = StorageOperation;

/** Where a file system call failed: the object's path under the root and the file it names. */
export interface FsSite {
  readonly protocol: string;
  readonly root: string;
  /** The object's path relative to the root (`context.path`). */
  readonly path: string;
  /** The file or directory the failed call was about, as the file system names it (for messages). */
  readonly file: string;
  readonly action: FsAction;
}

/** Errno names that show the object is not there: nothing at its name, or a file where one of its directories would be. */
export const MISSING_CODES: ReadonlySet<string> = new Set(["ENOENT", "ENOTDIR"]);

/** The errno name of a node:fs or memfs failure ("ENOENT"), or "" for anything else. */
export function errnoOf(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : "";
}

/** What went wrong and what to do about it, for the errno names worth explaining. */
function explain(errno: string, site: FsSite, fallback: string): { what: string; todo: string } {
  const retried = "transient, so worth retrying";
  switch (errno) {
    case "EROFS":
      return {
        what: "the file system is read-only",
        todo: "remount it read-write or use a location on a writable disk",
      };
    case "EACCES":
    case "EPERM": {
      const access = site.action === "read" || site.action === "stat" || site.action === "list" ? "read" : "write";
      return {
        what: "permission denied",
        todo: `let this process's user ${access} there (owner, mode, mount options) or use another location`,
      };
    }
    case "ENOSPC":
      return {
        what: "no space left on the device",
        todo: "free space or use another location; nothing partial was left behind",
      };
    case "EDQUOT":
      return {
        what: "the disk quota is used up",
        todo: "free space or use another location; nothing partial was left behind",
      };
    case "ENOENT":
      return { what: "its directory disappeared while writing (a concurrent delete?)", todo: retried };
    case "ENOTDIR":
    case "EEXIST":
      return {
        what: "a parent of it is a file, not a directory",
        todo: "remove or rename that file, or choose another path",
      };
    case "EISDIR":
      return {
        what: "it is a directory, which a file cannot replace",
        todo: "remove the directory or choose another path",
      };
    case "EMFILE":
    case "ENFILE":
      return {
        what: "too many open files",
        todo: `${retried}; if it persists raise the open-file limit (ulimit -n) or lower the concurrency`,
      };
    case "EIO":
      return { what: "an I/O error", todo: `${retried}; if it persists check the disk or network file system (dmesg)` };
    default:
      return { what: fallback, todo: errnoCode(errno, site.action).transient ? retried : "" };
  }
}

/**
 * The `CheckpointError` for a failed file system call, keeping the original as `cause`:
 * EROFS/EACCES/EPERM → `permission_denied`, ENOSPC/EDQUOT → `no_space`, else `storage`
 * (transient or not, see core's `errnoCode`). Missing objects and lost races are the caller's to
 * decide (`missingObject`, `existingObject`), because only it knows whether the call was about
 * the object itself. Messages read `[file] <file>: cannot <action>: <what> (<ERRNO>); <what to do>`.
 */
export function fsError(error: unknown, site: FsSite): CheckpointError {
  if (error instanceof CheckpointError) return error;
  const errno = errnoOf(error);
  const { code, transient } = errnoCode(errno, site.action);
  const reason = error instanceof Error ? error.message : String(error);
  const { what, todo } = explain(errno, site, reason);
  const message = `[${site.protocol}] ${site.file}: cannot ${site.action}: ${what}${errno ? ` (${errno})` : ""}${todo ? `; ${todo}` : ""}`;
  return new CheckpointError(code, message, {
    cause: error,
    context: { path: site.path, protocol: site.protocol, ...(code === "storage" ? { transient } : {}) },
  });
}

/** `not_found` for an object a call showed to be missing (ENOENT, ENOTDIR), with that call's error as `cause`. */
export function missingObject(error: unknown, site: FsSite): CheckpointError {
  const base = notFound(site.protocol, site.path, site.root);
  return new CheckpointError("not_found", base.message, { cause: error, context: base.context });
}

/** `already_exists` for an atomic create that found the name taken (EEXIST from link), with that error as `cause`. */
export function existingObject(error: unknown, site: FsSite): CheckpointError {
  const base = alreadyExists(site.protocol, site.path, site.root);
  return new CheckpointError("already_exists", base.message, { cause: error, context: base.context });
}
