import { CheckpointError, unrefTimer } from "@cairn/core";
import { MAX_TIMER_MS } from "@cairn/core/storage";
import { ImdsSession } from "./imds-session.js";
import { invalid } from "../arguments/manager-arguments.js";
import { type MetadataAnswer, type MetadataSession, requestMetadata, unexpectedAnswer } from "./metadata-request.js";
import type { PreemptionSource } from "./preemption.js";

export interface MetadataPreemptionOptions {
  /** The endpoint to poll (http or https). */
  readonly url: string;
  /** Poll period in ms (default 5 s). */
  readonly intervalMs?: number;
  readonly headers?: Readonly<Record<string, string>>;
  /** Whether a response is a notice (default: status 200 with body "TRUE", as GCE answers). */
  readonly isNotice?: (status: number, body: string) => boolean;
  /** Whether a status that is no notice is the endpoint's ordinary answer (default: 200); any other is a failed poll. */
  readonly isQuiet?: (status: number) => boolean;
  /** Deadline of each request, headers and body, in ms (default 2 s). */
  readonly timeoutMs?: number;
  /** Injected for tests; defaults to the global fetch. */
  readonly fetch?: typeof fetch;
  /** Adds headers to each request, such as IMDSv2's session token (`awsSpot()` sets one). */
  readonly session?: MetadataSession;
}

export interface AwsSpotOptions extends Partial<MetadataPreemptionOptions> {
  /** The IMDSv2 token endpoint (default: `/latest/api/token` on the host of `url`). */
  readonly tokenUrl?: string;
  /** Lifetime asked for each IMDSv2 token, in seconds (default 21600). */
  readonly tokenTtlSeconds?: number;
  /** The clock for token expiry, in ms; injected so tests control it. */
  readonly now?: () => number;
}

function checkUrl(name: string, url: unknown): void {
  let protocol: string | undefined;
  try {
    protocol = typeof url === "string" ? new URL(url).protocol : undefined;
  } catch (cause) {
    throw invalid(`MetadataPreemptionSource ${name}`, "an http:// or https:// URL", url, cause);
  }
  if (protocol !== "http:" && protocol !== "https:")
    throw invalid(`MetadataPreemptionSource ${name}`, "an http:// or https:// URL", url);
}

function checkSourceOptions(options: MetadataPreemptionOptions): void {
  if (typeof options !== "object" || options === null)
    throw invalid("MetadataPreemptionSource options", "an object", options);
  checkUrl("url", options.url);
  for (const name of ["intervalMs", "timeoutMs"] as const) {
    const value = options[name];
    if (value !== undefined && (typeof value !== "number" || !(value > 0) || !(value <= MAX_TIMER_MS)))
      throw invalid(`MetadataPreemptionSource ${name}`, `a positive number of ms up to ${MAX_TIMER_MS}`, value);
  }
  for (const name of ["isNotice", "isQuiet", "fetch"] as const) {
    if (options[name] !== undefined && typeof options[name] !== "function")
      throw invalid(`MetadataPreemptionSource ${name}`, "a function", options[name]);
  }
  const { headers, session } = options;
  if (
    headers !== undefined &&
    (typeof headers !== "object" || headers === null || !Object.values(headers).every((v) => typeof v === "string"))
  ) {
    throw invalid("MetadataPreemptionSource headers", "an object of strings", headers);
  }
  if (session !== undefined && (typeof session?.headers !== "function" || typeof session?.refused !== "function")) {
    throw invalid("MetadataPreemptionSource session", "an object with headers() and refused()", session);
  }
}

/**
 * A preemption notice from a cloud metadata endpoint, polled. Presets: `gce()` (the instance's
 * `preempted` flag) and `awsSpot()` (the spot `instance-action`, 404 until a notice, through
 * IMDSv2 session tokens with a fallback to IMDSv1). Every request has a deadline. A poll that
 * fails (no answer in time, a refused connection, an unexpected status) is reported once,
 * through the manager's `error` event, until a poll succeeds again; every tick asks anew.
 */
export class MetadataPreemptionSource implements PreemptionSource {
  readonly #options: MetadataPreemptionOptions;
  #timer: NodeJS.Timeout | undefined;
  #inFlight = false;
  #failing = false;

  constructor(options: MetadataPreemptionOptions) {
    checkSourceOptions(options);
    this.#options = options;
  }

  static gce(options: Partial<MetadataPreemptionOptions> = {}): MetadataPreemptionSource {
    return new MetadataPreemptionSource({
      url: "http://metadata.google.internal/computeMetadata/v1/instance/preempted",
      headers: { "Metadata-Flavor": "Google" },
      ...options,
    });
  }

  static awsSpot(options: AwsSpotOptions = {}): MetadataPreemptionSource {
    const { tokenUrl, tokenTtlSeconds, now, ...rest } = options;
    const url = rest.url ?? "http://169.254.169.254/latest/meta-data/spot/instance-action";
    checkUrl("url", url);
    if (tokenUrl !== undefined) checkUrl("tokenUrl", tokenUrl);
    if (
      tokenTtlSeconds !== undefined &&
      (!Number.isSafeInteger(tokenTtlSeconds) || tokenTtlSeconds < 1 || tokenTtlSeconds > 21600)
    ) {
      throw invalid("awsSpot tokenTtlSeconds", "an integer from 1 to 21600", tokenTtlSeconds);
    }
    if (now !== undefined && typeof now !== "function") throw invalid("awsSpot now", "a function returning ms", now);
    const session = new ImdsSession({
      tokenUrl: tokenUrl ?? new URL("/latest/api/token", url).href,
      ...(tokenTtlSeconds === undefined ? {} : { ttlSeconds: tokenTtlSeconds }),
      ...(rest.timeoutMs === undefined ? {} : { timeoutMs: rest.timeoutMs }),
      ...(rest.fetch === undefined ? {} : { fetch: rest.fetch }),
      ...(now === undefined ? {} : { now }),
    });
    return new MetadataPreemptionSource({
      isNotice: (status) => status === 200,
      isQuiet: (status) => status === 404,
      session,
      ...rest,
      url,
    });
  }

  start(notify: (reason: string) => void, report?: (error: unknown) => void): void {
    this.stop();
    const { url, intervalMs = 5000 } = this.#options;
    const isNotice =
      this.#options.isNotice ??
      ((status: number, body: string) => status === 200 && body.trim().toUpperCase() === "TRUE");
    const isQuiet = this.#options.isQuiet ?? ((status: number) => status === 200);
    const poll = async (): Promise<void> => {
      if (this.#inFlight) return;
      this.#inFlight = true;
      try {
        const answer = await this.#ask();
        // Stopped while this poll was in flight: the manager is gone.
        if (this.#timer === undefined) return;
        if (isNotice(answer.status, answer.body)) {
          this.stop();
          notify(`preemption notice from ${url}`);
        } else if (!isQuiet(answer.status)) {
          throw unexpectedAnswer("GET", url, answer);
        }
        this.#failing = false;
      } catch (cause) {
        if (!this.#failing && this.#timer !== undefined) {
          this.#failing = true;
          report?.(
            new CheckpointError(
              codeOf(cause),
              `the preemption poller cannot read ${url}, so a notice would be missed; it keeps trying every ${intervalMs} ms`,
              { cause, context: { path: url } },
            ),
          );
        }
      } finally {
        this.#inFlight = false;
      }
    };
    this.#timer = setInterval(() => void poll(), intervalMs);
    // Polling alone must not keep a finished training script alive.
    unrefTimer(this.#timer);
    void poll();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** One GET with the session's headers; after a 401 the session gets a new token and the GET is sent once more. */
  async #ask(): Promise<MetadataAnswer> {
    const { url, headers = {}, timeoutMs = 2000, session } = this.#options;
    const fetchFn = this.#options.fetch ?? fetch;
    const get = async (): Promise<MetadataAnswer> =>
      requestMetadata(fetchFn, url, { headers: { ...headers, ...(await session?.headers()) } }, timeoutMs);
    const answer = await get();
    if (answer.status !== 401 || !session) return answer;
    session.refused();
    return get();
  }
}

function codeOf(error: unknown): "timeout" | "permission_denied" | "storage" {
  return error instanceof CheckpointError && (error.code === "timeout" || error.code === "permission_denied")
    ? error.code
    : "storage";
}
