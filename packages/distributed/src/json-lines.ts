import type { Socket } from "node:net";

/**
 * Newline-delimited JSON over a socket: the wire format between ranks and the rendezvous
 * server. JSON never contains a raw newline, so a line is exactly one message.
 */
export function onJsonLines(socket: Socket, onMessage: (message: unknown) => void, onBadLine: (line: string) => void): void {
  let pending = "";
  socket.setEncoding("utf8");
  socket.on("data", (text: string) => {
    pending += text;
    let newline: number;
    while ((newline = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, newline);
      pending = pending.slice(newline + 1);
      let message: unknown;
      try {
        message = JSON.parse(line);
      } catch {
        onBadLine(line);
        continue;
      }
      onMessage(message);
    }
  });
}

export function sendJsonLine(socket: Socket, message: unknown): void {
  if (!socket.destroyed) socket.write(`${JSON.stringify(message)}\n`);
}
