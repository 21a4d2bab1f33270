import { constants } from "node:os";
import { CheckpointError, type CheckpointErrorCode, cancelledError } from "../errors.js";
import type {
  ByteRange,
  DeleteOptions,
  ObjectInfo,
  ReadOptions,
  StorageAdapter,
  WriteBody,
  WriteOptions,
} from "../storage/storage-adapter.js";
import { type StorageOperation, errnoCode } from "../storage/errno-codes.js";

export type FaultyOperation = StorageOperation;

/**
 * A fault to inject: the `nth` matching call of `operation` (1-based) and, with `times`, the ones
 * after it. What such a call does is at most one of `error`, `errno`, `shortRead` and `stall`;
 * with none of them it fails with a permanent `storage` error.
 */
export interface Fault {
  readonly operation: FaultyOperation;
  readonly nth?: number;
  /** How many consecutive matching calls fail from `nth` on (default 1). */
  readonly times?: number;
  /** Only calls on paths this accepts count (default: all). */
  readonly path?: (path: string) => boolean;
  /** The error to throw. */
  readonly error?: () => Error;
  /**
   * Fail as the local adapter reports a file system error of this errno name ("EROFS", "ENOSPC",
   * "EMFILE"): with its code (`errnoFaultCode`) and a node-style error (`code`, `errno`, `syscall`,
   * `path`) as `cause`.
   */
  readonly errno?: string;
  /** `read` only: resolve with at most this many of the bytes read, as a connection cut mid-body would. */
  readonly shortRead?: number;
  /**
   * `read` and `write` only: never settle until the call's signal aborts, then reject `cancelled`
   * (a write first hands the adapter its body's first part, as a stalled upload would). Without a
   * signal the call never settles: pass one.
   */
  readonly stall?: boolean;
}

/**
 * The code an `errno` fault fails with, as `@cairn/storage-local` reports a failure of that
 * errno name from a call about the object (its tests check that the two agree).
 */
export function errnoFaultCode(
  errno: string,
  operation: FaultyOperation,
): { code: CheckpointErrorCode; transient: boolean } {
  if ((errno === "ENOENT" || errno === "ENOTDIR") && operation === "read")
    return { code: "not_found", transient: false };
  if (errno === "EEXIST" && operation === "write") return { code: "already_exists", transient: false };
  return errnoCode(errno, operation);
}

/** An error shaped like node:fs's for `errno` failing `syscall` on `path`. */
export function errnoError(errno: string, syscall: string, path: string): NodeJS.ErrnoException {
  const number = (constants.errno as Readonly<Record<string, number>>)[errno];
  return Object.assign(new Error(`${errno}: injected failure, ${syscall} '${path}'`), {
    code: errno,
    syscall,
    path,
    ...(number === undefined ? {} : { errno: -number }),
  });
}

const SYSCALLS: Readonly<Record<FaultyOperation, string>> = {
  read: "read",
  write: "write",
  stat: "stat",
  list: "scandir",
  delete: "unlink",
};

function checkFault(fault: Fault): void {
  const effects = [fault.error, fault.errno, fault.shortRead, fault.stall].filter(
    (e) => e !== undefined && e !== false,
  ).length;
  const problem =
    effects > 1
      ? "sets more than one of error, errno, shortRead and stall"
      : fault.shortRead !== undefined && fault.operation !== "read"
        ? "sets shortRead on an operation other than read"
        : fault.stall && fault.operation !== "read" && fault.operation !== "write"
          ? "stalls an operation without a signal (only read and write take one)"
          : undefined;
  if (problem) throw new CheckpointError("invalid_argument", `a fault on ${fault.operation} ${problem}`);
}

/** Never settles; rejects `cancelled` once `signal` aborts. */
function stalled(signal: AbortSignal | undefined, what: string): Promise<never> {
  return new Promise((_, reject) => {
    if (!signal) return;
    if (signal.aborted) reject(cancelledError(signal, what));
    signal.addEventListener("abort", () => reject(cancelledError(signal, what)), { once: true });
  });
}

/**
 * Wraps an adapter and makes chosen calls fail, come back short or stall, so tests inject
 * faults below the code under test (like flystorage's chaos decorator). Failing writes fail
 * after consuming part of their body, as a connection dropped mid-upload would.
 *
 * ```ts
 * new FaultyStorageAdapter(inner, [
 *   { operation: "delete", path: (p) => p.startsWith("3/"), errno: "EACCES" }, // permission_denied
 *   { operation: "read", nth: 2, shortRead: 10 },                              // a short body
 *   { operation: "read", path: (p) => p.endsWith(".safetensors"), stall: true }, // until aborted
 * ]);
 * ```
 */
export class FaultyStorageAdapter implements StorageAdapter {
  readonly protocol: string;
  readonly root: string;
  readonly remote: boolean;
  readonly calls: Record<FaultyOperation, string[]> = { read: [], write: [], stat: [], list: [], delete: [] };
  readonly #inner: StorageAdapter;
  readonly #faults: Fault[] = [];
  readonly #seen = new Map<Fault, number>();

  /** Throws `invalid_argument` for a fault that asks for two effects or one its operation cannot have. */
  constructor(inner: StorageAdapter, faults: readonly Fault[] = []) {
    this.#inner = inner;
    for (const fault of faults) this.addFault(fault);
    this.protocol = inner.protocol;
    this.root = inner.root;
    this.remote = inner.remote === true;
  }

  addFault(fault: Fault): void {
    checkFault(fault);
    this.#faults.push(fault);
  }

  /** The fault this call triggers, if any; every matching fault counts the call. */
  #match(operation: FaultyOperation, path: string): { fault: Fault; count: number } | undefined {
    this.calls[operation].push(path);
    let hit: { fault: Fault; count: number } | undefined;
    for (const fault of this.#faults) {
      if (fault.operation !== operation || (fault.path && !fault.path(path))) continue;
      const count = (this.#seen.get(fault) ?? 0) + 1;
      this.#seen.set(fault, count);
      const first = fault.nth ?? 1;
      if (!hit && count >= first && count < first + (fault.times ?? 1)) hit = { fault, count };
    }
    return hit;
  }

  #error({ fault, count }: { fault: Fault; count: number }, operation: FaultyOperation, path: string): Error {
    if (fault.error) return fault.error();
    const at = `[${this.protocol}] ${path}: injected failure of ${operation} (call ${count})`;
    if (fault.errno === undefined)
      return new CheckpointError("storage", at, { context: { path, protocol: this.protocol, transient: false } });
    const { code, transient } = errnoFaultCode(fault.errno, operation);
    return new CheckpointError(code, `${at} (${fault.errno})`, {
      cause: errnoError(fault.errno, SYSCALLS[operation], path),
      context: { path, protocol: this.protocol, ...(code === "storage" ? { transient } : {}) },
    });
  }

  async read(path: string, range?: ByteRange, options?: ReadOptions): Promise<Uint8Array> {
    const hit = this.#match("read", path);
    if (!hit) return this.#inner.read(path, range, options);
    if (hit.fault.stall) return stalled(options?.signal, `reading ${path}`);
    if (hit.fault.shortRead === undefined) throw this.#error(hit, "read", path);
    const bytes = await this.#inner.read(path, range, options);
    return bytes.subarray(0, Math.min(hit.fault.shortRead, bytes.byteLength));
  }

  async write(path: string, body: WriteBody, options?: WriteOptions): Promise<void> {
    const hit = this.#match("write", path);
    if (!hit) return this.#inner.write(path, body, options);
    const end = hit.fault.stall
      ? () => stalled(options?.signal, `writing ${path}`)
      : () => Promise.reject(this.#error(hit, "write", path));
    async function* firstPartThenEnd(): AsyncGenerator<Uint8Array> {
      for await (const part of body instanceof Uint8Array ? [body] : body) {
        yield part;
        break;
      }
      await end();
    }
    return this.#inner.write(path, firstPartThenEnd(), options);
  }

  async stat(path: string): Promise<ObjectInfo | null> {
    const hit = this.#match("stat", path);
    if (hit) throw this.#error(hit, "stat", path);
    return this.#inner.stat(path);
  }

  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    const hit = this.#match("list", prefix);
    if (hit) throw this.#error(hit, "list", prefix);
    yield* this.#inner.list(prefix);
  }

  async delete(path: string, options?: DeleteOptions): Promise<void> {
    const hit = this.#match("delete", path);
    if (hit) throw this.#error(hit, "delete", path);
    return this.#inner.delete(path, options);
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}
