import type { Socket } from "node:net";

/** The largest message either side accepts by default: a peer cannot grow a line without end. */
export const DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024;

/**
 * Newline-delimited JSON over a socket: the wire format between ranks and the rendezvous
 * server. JSON never contains a raw newline, so a line is exactly one message. Each byte is
 * scanned once; a line longer than `maxBytes()` (or not JSON) calls `onBadLine` and ends the stream.
 */
export function onJsonLines(
  socket: Socket,
  onMessage: (message: unknown) => void,
  onBadLine: (reason: string) => void,
  maxBytes: () => number = () => DEFAULT_MAX_MESSAGE_BYTES,
): void {
  let pending: Buffer[] = [];
  let size = 0;
  let dead = false;
  const bad = (reason: string): void => {
    dead = true;
    pending = [];
    onBadLine(reason);
  };
  socket.on("data", (chunk: Buffer) => {
    let start = 0;
    while (!dead) {
      const newline = chunk.indexOf(10, start);
      const end = newline < 0 ? chunk.length : newline;
      size += end - start;
      if (size > maxBytes()) return bad(`a message longer than ${maxBytes()} bytes`);
      if (newline < 0) {
        if (end > start) pending.push(chunk.subarray(start));
        return;
      }
      const piece = chunk.subarray(start, newline);
      const line = pending.length > 0 ? Buffer.concat([...pending, piece]) : piece;
      pending = [];
      size = 0;
      start = newline + 1;
      let message: unknown;
      try {
        message = JSON.parse(line.toString("utf8"));
      } catch {
        return bad("a malformed message");
      }
      if (typeof message !== "object" || message === null || Array.isArray(message))
        return bad("a message that is not an object");
      onMessage(message);
    }
  });
}

/** Sends one message; throws `RangeError` if it is longer than `maxBytes`, before anything is sent. */
export function sendJsonLine(socket: Socket, message: unknown, maxBytes = DEFAULT_MAX_MESSAGE_BYTES): void {
  const line = `${JSON.stringify(message)}\n`;
  if (Buffer.byteLength(line) > maxBytes)
    throw new RangeError(`a message of ${Buffer.byteLength(line)} bytes is longer than the limit of ${maxBytes}`);
  if (!socket.destroyed) socket.write(line);
}
