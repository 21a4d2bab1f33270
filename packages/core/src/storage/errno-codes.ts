import type { CheckpointErrorCode } from "../errors.js";

/** What a storage call was doing when it failed. */
export type StorageOperation = "read" | "write" | "stat" | "list" | "delete";

const PERMISSION_ERRNOS: ReadonlySet<string> = new Set(["EROFS", "EACCES", "EPERM"]);
const NO_SPACE_ERRNOS: ReadonlySet<string> = new Set(["ENOSPC", "EDQUOT"]);

/**
 * Worth retrying: descriptors and kernel resources free up (EMFILE, ENFILE, EAGAIN, EBUSY, EINTR),
 * network file systems recover (ETIMEDOUT, ESTALE), and EIO is retried because a retry rewrites
 * the whole temp file or rereads through a new descriptor, never trusting the failed one; retries are bounded.
 */
const TRANSIENT_ERRNOS: ReadonlySet<string> = new Set([
  "EMFILE",
  "ENFILE",
  "EAGAIN",
  "EBUSY",
  "EINTR",
  "EIO",
  "ETIMEDOUT",
  "ESTALE",
]);

/**
 * The code a file system failure with this errno name ("ENOSPC") gets, and whether a retry may
 * mend it: EROFS/EACCES/EPERM → `permission_denied`, ENOSPC/EDQUOT → `no_space`, else `storage`.
 * Whether ENOENT or EEXIST means a missing or taken object is the caller's to decide; during a
 * write ENOENT means a concurrent delete removed the directory between mkdir and open, which a
 * retry repairs.
 */
export function errnoCode(
  errno: string,
  operation: StorageOperation,
): { code: CheckpointErrorCode; transient: boolean } {
  if (PERMISSION_ERRNOS.has(errno)) return { code: "permission_denied", transient: false };
  if (NO_SPACE_ERRNOS.has(errno)) return { code: "no_space", transient: false };
  return { code: "storage", transient: TRANSIENT_ERRNOS.has(errno) || (errno === "ENOENT" && operation === "write") };
}
