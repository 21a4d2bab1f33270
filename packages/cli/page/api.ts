// The page's requests: relative to the page's own URL, so the token in its path goes with each one.
import { useEffect, useState } from "preact/hooks";
import type { ApiError, VerifyEvent } from "../src/ui/ui-types.js";

/** A request the server refused or could not answer, with its error code. */
export class ApiFailure extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.code = code;
  }
}

function url(path: string, params: Readonly<Record<string, string | number | undefined>>): string {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) if (value !== undefined) query.set(name, String(value));
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}

async function failure(response: Response): Promise<ApiFailure> {
  try {
    const body = (await response.json()) as ApiError;
    return new ApiFailure(body.error.code, body.error.message);
  } catch {
    return new ApiFailure("http", `the server answered ${response.status} ${response.statusText}`);
  }
}

/** GET of an API, its JSON answer. */
export async function get<T>(
  path: string,
  params: Readonly<Record<string, string | number | undefined>> = {},
): Promise<T> {
  const response = await fetch(url(path, params), { cache: "no-store" });
  if (!response.ok) throw await failure(response);
  return (await response.json()) as T;
}

/**
 * A component's GET of an API, asked again when its parameters change: the answer, or the
 * failure's message, while an answer to older parameters is dropped.
 */
export function useGet<T>(
  path: string,
  params: Readonly<Record<string, string | number | undefined>>,
): { readonly data: T | null; readonly failure: string | null } {
  const [state, setState] = useState<{ data: T | null; failure: string | null }>({ data: null, failure: null });
  const key = JSON.stringify([path, params]);
  useEffect(() => {
    let current = true;
    setState({ data: null, failure: null });
    get<T>(path, params)
      .then((data) => current && setState({ data, failure: null }))
      .catch((error: Error) => current && setState({ data: null, failure: error.message }));
    return () => {
      current = false;
    };
  }, [key]);
  return state;
}

/** A GET asked again and again: unchanged answers (304, by ETag) resolve undefined. */
export function poller<T>(path: string): () => Promise<T | undefined> {
  let etag: string | null = null;
  return async () => {
    const response = await fetch(path, { cache: "no-store", headers: etag ? { "If-None-Match": etag } : {} });
    if (response.status === 304) return undefined;
    if (!response.ok) throw await failure(response);
    etag = response.headers.get("ETag");
    return (await response.json()) as T;
  };
}

/** Runs a verification, calling `onEvent` with each JSON line the server streams. */
export async function verifyStream(
  step: number,
  tier: number,
  onEvent: (event: VerifyEvent) => void,
  signal: AbortSignal,
): Promise<void> {
  const response = await fetch(url("api/verify", { step, tier }), { cache: "no-store", signal });
  if (!response.ok || !response.body) throw await failure(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let rest = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    rest += value;
    const lines = rest.split("\n");
    rest = lines.pop()!;
    for (const line of lines) if (line.trim() !== "") onEvent(JSON.parse(line) as VerifyEvent);
  }
}
