import { CheckpointError, isCheckpointError } from "@cairn/core";
import { type MetadataSession, requestMetadata, unexpectedAnswer } from "./metadata-request.js";

export interface ImdsSessionOptions {
  /** The token endpoint, `http://169.254.169.254/latest/api/token` on EC2. */
  readonly tokenUrl: string;
  /** Lifetime asked for each token, in seconds (default 21600, the most IMDS grants). */
  readonly ttlSeconds?: number;
  /** Deadline of each token request, in ms (default 2 s). */
  readonly timeoutMs?: number;
  readonly fetch?: typeof fetch;
  /** The clock for token expiry, in ms; injected so tests control it. */
  readonly now?: () => number;
}

const TOKEN_HEADER = "X-aws-ec2-metadata-token";
const TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds";
/** Token-request answers that mean IMDSv2 is absent here, as the AWS SDKs read them. */
const NO_V2 = new Set([403, 404, 405]);

/**
 * IMDSv2 session tokens for EC2's instance metadata service: PUT the token endpoint, then send
 * the token on every GET; a new one is asked for shortly before it expires and after any 401.
 * Where IMDSv2 is absent (the PUT answers 403, 404 or 405, or not at all, as when a container's
 * hop limit drops the reply) requests go without a token (IMDSv1), as the AWS SDKs do, until a 401
 * says tokens are required after all.
 */
export class ImdsSession implements MetadataSession {
  readonly #tokenUrl: string;
  readonly #ttlSeconds: number;
  readonly #timeoutMs: number;
  readonly #fetch: typeof fetch;
  readonly #now: () => number;
  #token: { readonly value: string; readonly refreshAt: number } | undefined;
  #v1 = false;

  constructor(options: ImdsSessionOptions) {
    this.#tokenUrl = options.tokenUrl;
    this.#ttlSeconds = options.ttlSeconds ?? 21600;
    this.#timeoutMs = options.timeoutMs ?? 2000;
    this.#fetch = options.fetch ?? fetch;
    this.#now = options.now ?? Date.now;
  }

  async headers(): Promise<Readonly<Record<string, string>>> {
    if (this.#v1) return {};
    const now = this.#now();
    if (!this.#token || now >= this.#token.refreshAt) {
      this.#token = undefined;
      const value = await this.#askToken();
      if (value === undefined) {
        this.#v1 = true;
        return {};
      }
      // Renewed a minute (or a tenth of a short lifetime) early, so no request carries an expired token.
      this.#token = { value, refreshAt: now + this.#ttlSeconds * 1000 - Math.min(60_000, this.#ttlSeconds * 100) };
    }
    return { [TOKEN_HEADER]: this.#token.value };
  }

  refused(): void {
    this.#token = undefined;
    this.#v1 = false;
  }

  /** A new token, or undefined where IMDSv2 is absent. */
  async #askToken(): Promise<string | undefined> {
    let answer;
    try {
      answer = await requestMetadata(
        this.#fetch,
        this.#tokenUrl,
        { method: "PUT", headers: { [TTL_HEADER]: String(this.#ttlSeconds) } },
        this.#timeoutMs,
      );
    } catch (error) {
      if (isCheckpointError(error, "timeout")) return undefined;
      throw error;
    }
    if (NO_V2.has(answer.status)) return undefined;
    if (answer.status !== 200) throw unexpectedAnswer("PUT", this.#tokenUrl, answer);
    const token = answer.body.trim();
    // The token goes into a header: anything but visible ASCII would make every later request fail.
    if (!/^[\x21-\x7e]{1,4096}$/.test(token)) {
      throw new CheckpointError(
        "corrupt",
        `PUT ${this.#tokenUrl} answered a token that is not a valid header value (${token.length} characters)`,
        { context: { path: this.#tokenUrl } },
      );
    }
    return token;
  }
}
