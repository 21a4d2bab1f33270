const READY = "__cairnTestReady";
const FUNCTIONS = "__cairnTestFunctions";

/** A function a test may call through `TestPage.call`: JSON-like arguments and result. */
export type PageFunction = (...args: never[]) => unknown;

/** Makes `functions` callable from the test (`testPage.call(name, ...args)`) and marks the page ready. */
export function exposeToTests(functions: Readonly<Record<string, PageFunction>>): void {
  const global = globalThis as Record<string, unknown>;
  global[FUNCTIONS] = { ...functions };
  global[READY] = true;
}
