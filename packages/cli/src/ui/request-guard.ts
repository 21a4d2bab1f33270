import { timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { isIP } from "node:net";
import { hostname, networkInterfaces } from "node:os";

/** The names a browser on this machine reaches the loopback address by. */
const LOOPBACK = ["127.0.0.1", "localhost", "[::1]"];
const WILDCARDS = new Set(["0.0.0.0", "::", "[::]"]);

/** A host as it appears in a Host header: IPv6 addresses in brackets, lower case. */
function hostForm(host: string): string {
  const bare = host.replace(/^\[(.*)\]$/, "$1");
  return (isIP(bare) === 6 ? `[${bare}]` : bare).toLowerCase();
}

/**
 * The Host header values the server answers (`name:port`): the loopback names, and the bind
 * address given with --host; for a wildcard bind (0.0.0.0, ::), this machine's addresses and
 * name. Any other Host is a page of another site reaching the server through DNS rebinding.
 */
export function allowedHosts(
  bind: string,
  port: number,
  interfaces = networkInterfaces(),
  name = hostname(),
): Set<string> {
  const hosts = new Set(LOOPBACK);
  if (WILDCARDS.has(bind)) {
    for (const list of Object.values(interfaces))
      for (const address of list ?? []) hosts.add(hostForm(address.address));
    hosts.add(name.toLowerCase());
  } else hosts.add(hostForm(bind));
  return new Set([...hosts].map((h) => `${h}:${port}`));
}

/** What is wrong with a request, as an HTTP status and a message; undefined when it may be answered. */
export interface Refusal {
  readonly status: number;
  readonly message: string;
}

function sameToken(given: string, token: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * Checks a request before anything else reads it: only GET and HEAD (the server changes
 * nothing); a Host header the server answers to (no DNS rebinding); an Origin, when a browser
 * sends one, of that same host; and the token as the path's first segment. Returns the path
 * after the token (`/`, `/api/steps`…; "" for the token alone) or why the request is refused.
 */
export function checkRequest(
  request: Pick<IncomingMessage, "method" | "headers" | "url">,
  token: string,
  hosts: ReadonlySet<string>,
): { readonly path: string; readonly query: URLSearchParams } | Refusal {
  if (request.method !== "GET" && request.method !== "HEAD")
    return { status: 405, message: "read-only: only GET and HEAD are answered" };
  const host = (request.headers.host ?? "").toLowerCase();
  if (!hosts.has(host)) return { status: 403, message: `Host ${JSON.stringify(host)} is not this server's` };
  const origin = request.headers.origin;
  if (origin !== undefined && !(origin.startsWith("http://") && hosts.has(origin.slice(7).toLowerCase())))
    return { status: 403, message: `Origin ${JSON.stringify(origin)} is not this server's` };
  let url: URL;
  try {
    url = new URL(request.url ?? "", `http://${host}`);
  } catch {
    return { status: 400, message: "a malformed URL" };
  }
  const [, first = "", ...rest] = url.pathname.split("/");
  if (!sameToken(first, token))
    return { status: 403, message: "the URL's token is missing or wrong; use the URL cairn ui printed" };
  // The token alone (no slash after it) is "": the page's relative URLs need the slash, so it is redirected.
  return { path: rest.length === 0 ? "" : `/${rest.join("/")}`, query: url.searchParams };
}
