// What differs between Node and a browser, the browser's side (see runtime.ts): no `node:` import.

export const RUNTIME: "node" | "browser" = "browser";

/** A window's thread (where tfjs trains), not a worker's. */
export const onMainThread: boolean = typeof (globalThis as { document?: unknown }).document !== "undefined";

/** A message to ourselves runs after pending tasks without setTimeout's 4 ms clamp. */
export function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => {
    const channel = new MessageChannel();
    channel.port1.onmessage = () => {
      channel.port1.close();
      resolve();
    };
    channel.port2.postMessage(undefined);
  });
}

/** A page has no process to keep alive. */
export function unrefTimer(_timer: ReturnType<typeof setTimeout>): void {}

export function emitWarning(message: string, code: string): void {
  console.warn(`${code}: ${message}`);
}
