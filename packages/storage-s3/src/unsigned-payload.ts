/** SigV4's value of `x-amz-content-sha256` for a body the signature does not cover. */
const UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD";

type Handler<A, R> = (args: A) => Promise<R>;

/** A middleware for the finalize step, whatever the command's input and output. */
function unsignedPayload<A extends { request: unknown }, R>(next: Handler<A, R>): Handler<A, R> {
  return (args) => {
    const { headers } = args.request as { headers?: Record<string, string> };
    if (headers && Object.keys(headers).some((name) => name.toLowerCase().startsWith("x-amz-checksum-")))
      headers["x-amz-content-sha256"] = UNSIGNED_PAYLOAD;
    return next(args);
  };
}

const placement = { name: "cairnUnsignedPayload", relation: "before", toMiddleware: "httpSigningMiddleware" } as const;

/**
 * Spares the SDK's SHA-256 of an upload's body when the request carries a checksum the server
 * verifies (`x-amz-checksum-*`: Cairn's CRC32C, or the SDK's own CRC32 when Cairn sends none):
 * the body is then sent as `UNSIGNED-PAYLOAD`, as the SDK itself sends every streamed body
 * (with a checksum trailer). A request without such a header is signed over its payload as before.
 * Added to one command's stack, never to a client's, so a client passed in is left as it was.
 */
export function withUnsignedPayload<
  C extends { middlewareStack: { addRelativeTo(m: typeof unsignedPayload, o: typeof placement): void } },
>(command: C): C {
  command.middlewareStack.addRelativeTo(unsignedPayload, placement);
  return command;
}
