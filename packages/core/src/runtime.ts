// What differs between Node and a browser, Node's side. Imported as "#platform/runtime.js": the
// browser build gets runtime.browser.ts instead (package.json "imports", condition "browser").
import { isMainThread } from "node:worker_threads";

/** Where this code runs: the browser build says "browser". */
export const RUNTIME: "node" | "browser" = "node";

/** True on the thread that runs the training loop (not on a worker thread). */
export const onMainThread: boolean = isMainThread;

/** Resolves after pending I/O callbacks ran: a long computation calls it between slices. */
export function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Lets the process exit while `timer` is pending (a timer that guards work never keeps it alive by itself). */
export function unrefTimer(timer: ReturnType<typeof setTimeout>): void {
  timer.unref();
}

/** A warning for the operator: a process warning in Node, the console in a browser. */
export function emitWarning(message: string, code: string): void {
  process.emitWarning(message, { code });
}
