import { CheckpointError } from "@cairn/core";

/** Adds headers to each request of a polled metadata endpoint, such as IMDSv2's session token. */
export interface MetadataSession {
  /** Headers for the next request; may first ask the endpoint for a token. */
  headers(): Promise<Readonly<Record<string, string>>>;
  /** The endpoint answered 401 to those headers: forget the token, so the next `headers()` asks anew. */
  refused(): void;
}

export interface MetadataAnswer {
  readonly status: number;
  readonly body: string;
}

/**
 * One request to a metadata endpoint with a deadline on all of it, headers and body. A request
 * that fails or runs out of time is a `CheckpointError` (`timeout`, or `storage` for a refused
 * or broken connection) with the cause kept.
 */
export async function requestMetadata(
  fetchFn: typeof fetch,
  url: string,
  init: { readonly method?: string; readonly headers: Readonly<Record<string, string>> },
  timeoutMs: number,
): Promise<MetadataAnswer> {
  const method = init.method ?? "GET";
  try {
    const response = await fetchFn(url, { method, headers: init.headers, signal: AbortSignal.timeout(timeoutMs) });
    return { status: response.status, body: await response.text() };
  } catch (cause) {
    const deadline = cause instanceof Error && (cause.name === "TimeoutError" || cause.name === "AbortError");
    const why = deadline
      ? `had no answer within ${timeoutMs} ms`
      : `failed (${cause instanceof Error ? cause.message : String(cause)})`;
    throw new CheckpointError(deadline ? "timeout" : "storage", `${method} ${url} ${why}`, {
      cause,
      context: { path: url },
    });
  }
}

/** An answer that is neither a notice nor the endpoint's ordinary reply. */
export function unexpectedAnswer(method: string, url: string, answer: MetadataAnswer): CheckpointError {
  const code = answer.status === 401 || answer.status === 403 ? "permission_denied" : "storage";
  return new CheckpointError(code, `${method} ${url} answered HTTP ${answer.status}: ${answer.body.slice(0, 200)}`, {
    context: { path: url },
  });
}
