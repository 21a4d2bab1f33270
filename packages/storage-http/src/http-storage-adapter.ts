import { CheckpointError } from "@cairn/core";
import {
  type ByteRange,
  type ObjectInfo,
  type ReadOptions,
  type RetryPolicy,
  type StorageAdapter,
  DEFAULT_PROGRESS_TIMEOUT_MS,
  ReadTarget,
  checkRelativePath,
  notFound,
  parseContentRange,
  progressDeadline,
  redactUrl,
  withRetry,
} from "@cairn/core/storage";
import { HTTP_INDEX_FILE, parseHttpIndex } from "./http-index.js";

export interface HttpStorageOptions {
  /** The fetch to use (default the global one: Node's undici, a browser's). */
  readonly fetch?: typeof fetch;
  /** No bytes for this long aborts a request, which is then retried (default core's progress timeout). */
  readonly progressTimeoutMs?: number;
  readonly retry?: Partial<RetryPolicy>;
  /** Sent with every request (an Authorization header for a private CDN). */
  readonly headers?: Readonly<Record<string, string>>;
}

const READ_ONLY = "read-only";

/**
 * `https://host/run` (and `http://`): a published root on any static web server or CDN, read
 * with ranged GETs, so a load fetches only the byte ranges it needs and verifies every block.
 * Every request has a progress deadline and transient failures (5xx, 429, resets, stalls, short
 * bodies) are retried with core's policy. A server that ignores `Range` answers 200 with the
 * whole object: the read then streams it, keeps the range and drops the rest, so it works at the
 * cost of the bytes before the range (docs/browser.md). HTTP cannot list: `list` reads the index
 * file `cairn publish` writes at the root. Writes and deletes are refused.
 */
export class HttpStorageAdapter implements StorageAdapter {
  readonly protocol: string;
  readonly root: string;
  readonly remote = true;
  readonly #base: URL;
  readonly #fetch: typeof fetch;
  readonly #timeout: number;
  readonly #retry: Partial<RetryPolicy>;
  readonly #headers: Readonly<Record<string, string>>;

  constructor(url: URL, options: HttpStorageOptions = {}) {
    this.protocol = url.protocol.replace(/:$/, "");
    this.#base = new URL(url.href.endsWith("/") ? url.href : `${url.href}/`);
    this.root = redactUrl(url);
    this.#fetch = options.fetch ?? ((input, init) => fetch(input, init));
    this.#timeout = options.progressTimeoutMs ?? DEFAULT_PROGRESS_TIMEOUT_MS;
    this.#retry = options.retry ?? {};
    this.#headers = options.headers ?? {};
  }

  #url(path: string): URL {
    checkRelativePath(this.protocol, path);
    return new URL(path.split("/").map(encodeURIComponent).join("/"), this.#base);
  }

  #error(path: string, what: string, transient: boolean, cause?: unknown): CheckpointError {
    return new CheckpointError("storage", `[${this.protocol}] ${what} (${this.root}/${path})`, {
      cause,
      context: { path, protocol: this.protocol, transient },
    });
  }

  #statusError(path: string, status: number): CheckpointError {
    if (status === 404 || status === 410) return notFound(this.protocol, path, this.root);
    if (status === 401 || status === 403)
      return new CheckpointError(
        "permission_denied",
        `[${this.protocol}] the server refused ${path} (HTTP ${status})`,
        {
          context: { path, protocol: this.protocol },
        },
      );
    return this.#error(path, `HTTP ${status}`, status >= 500 || status === 429 || status === 408);
  }

  read(path: string, range?: ByteRange, options: ReadOptions = {}): Promise<Uint8Array> {
    const url = this.#url(path);
    if (range && range.length <= 0) return Promise.resolve(new ReadTarget(0, options).result(0));
    return withRetry(() => this.#get(url, path, range, options), {
      policy: this.#retry,
      exhaust: true,
      ...(options.signal ? { signal: options.signal } : {}),
    });
  }

  async #get(url: URL, path: string, range: ByteRange | undefined, options: ReadOptions): Promise<Uint8Array> {
    const deadline = progressDeadline(this.#timeout, {
      ...(options.signal ? { signal: options.signal } : {}),
      what: `[${this.protocol}] GET ${path}`,
      context: { path, protocol: this.protocol },
    });
    try {
      const headers: Record<string, string> = { ...this.#headers };
      if (range) headers.range = `bytes=${range.offset}-${range.offset + range.length - 1}`;
      const response = await this.#fetch(url, { headers, signal: deadline.signal });
      deadline.touch();
      if (response.status === 416) {
        await response.body?.cancel();
        return new ReadTarget(0, options).result(0);
      }
      if (!response.ok) {
        await response.body?.cancel();
        throw this.#statusError(path, response.status);
      }
      const declared = declaredLength(response);
      let skip = 0;
      let keep: number | undefined;
      if (response.status === 206) {
        const answered = parseContentRange(response.headers.get("content-range") ?? undefined);
        if (!range || !answered || answered.start !== range.offset)
          throw this.#error(path, `the server answered another range (${response.headers.get("content-range")})`, true);
        options.onObjectSize?.(answered.size);
        keep = answered.size === 0 ? 0 : answered.end - answered.start + 1;
        if (declared !== undefined && declared !== keep)
          throw this.#error(path, `Content-Range says ${keep} bytes, Content-Length ${declared}`, true);
      } else {
        // 200: the whole object, whether or not a range was asked for (a server that ignores Range).
        if (declared !== undefined) options.onObjectSize?.(declared);
        if (range) {
          skip = range.offset;
          keep = declared === undefined ? range.length : Math.max(0, Math.min(range.length, declared - range.offset));
        } else keep = declared;
      }
      return await this.#body(response, path, skip, keep, declared, options, deadline.touch);
    } catch (error) {
      if (deadline.expired) throw deadline.error;
      if (error instanceof CheckpointError) throw error;
      if (options.signal?.aborted) throw error;
      // fetch's TypeError: a refused, reset or cut connection.
      throw this.#error(path, `the request failed: ${(error as Error)?.message}`, true, error);
    } finally {
      deadline.clear();
    }
  }

  /** Streams the body into the read's target: `skip` bytes dropped, then `keep` kept (all, when undefined). */
  async #body(
    response: Response,
    path: string,
    skip: number,
    keep: number | undefined,
    declared: number | undefined,
    options: ReadOptions,
    touch: () => void,
  ): Promise<Uint8Array> {
    const reader = response.body?.getReader();
    const pieces: Uint8Array[] = [];
    const target = keep === undefined ? undefined : new ReadTarget(keep, options);
    let received = 0;
    let kept = 0;
    while (reader) {
      const { done, value } = await reader.read();
      if (done) break;
      touch();
      const from = Math.max(0, skip - received);
      received += value.byteLength;
      if (from >= value.byteLength) continue;
      const piece = value.subarray(from, keep === undefined ? undefined : from + (keep - kept));
      if (target) target.set(piece, kept);
      else pieces.push(piece);
      kept += piece.byteLength;
      // A server that ignored Range: the rest of the object is not needed.
      if (keep !== undefined && kept >= keep && skip + keep < (declared ?? Infinity)) {
        await reader.cancel();
        return target!.result(kept);
      }
    }
    if (declared !== undefined && received !== declared && !response.headers.get("content-encoding"))
      throw this.#error(path, `the body ended after ${received} of ${declared} bytes`, true);
    if (keep !== undefined && kept !== keep)
      throw this.#error(path, `the body held ${kept} of the ${keep} bytes asked for`, true);
    if (target) return target.result(kept);
    const whole = new ReadTarget(kept, options);
    let at = 0;
    for (const piece of pieces) {
      whole.set(piece, at);
      at += piece.byteLength;
    }
    return whole.result(kept);
  }

  async stat(path: string): Promise<ObjectInfo | null> {
    let size: number | undefined;
    try {
      await this.read(path, { offset: 0, length: 1 }, { onObjectSize: (s) => (size = s) });
    } catch (error) {
      if ((error as CheckpointError).code === "not_found") return null;
      throw error;
    }
    return size === undefined ? null : { path, size };
  }

  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    let bytes: Uint8Array;
    try {
      bytes = await this.read(HTTP_INDEX_FILE);
    } catch (error) {
      if ((error as CheckpointError).code !== "not_found") throw error;
      throw new CheckpointError(
        "not_found",
        `[${this.protocol}] ${this.root} has no ${HTTP_INDEX_FILE}, so its steps cannot be listed (HTTP cannot list): publish them with cairn publish ROOT STEP`,
        { cause: error, context: { path: HTTP_INDEX_FILE, protocol: this.protocol } },
      );
    }
    for (const object of parseHttpIndex(bytes, `${this.root}/${HTTP_INDEX_FILE}`))
      if (object.path.startsWith(prefix)) yield object;
  }

  write(path: string): Promise<void> {
    return Promise.reject(this.#readOnly(path));
  }

  delete(path: string): Promise<void> {
    return Promise.reject(this.#readOnly(path));
  }

  #readOnly(path: string): CheckpointError {
    return new CheckpointError(
      "permission_denied",
      `[${this.protocol}] ${this.protocol}:// storage is ${READ_ONLY}: write ${path} elsewhere and publish it (cairn publish)`,
      { context: { path, protocol: this.protocol } },
    );
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

/** Content-Length as a byte count, when the server sent a plausible one. */
function declaredLength(response: Response): number | undefined {
  const header = response.headers.get("content-length");
  if (header === null || !/^\d{1,16}$/.test(header)) return undefined;
  const value = Number(header);
  return Number.isSafeInteger(value) ? value : undefined;
}
