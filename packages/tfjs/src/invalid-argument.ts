import { CheckpointError } from "@cairn/core";

/** The offending value as a message shows it (JSON where it has one, cut short): never throws. */
function shown(value: unknown): string {
  if (typeof value === "function") return "a function";
  try {
    const json = JSON.stringify(value);
    if (json !== undefined) return json.length > 200 ? `${json.slice(0, 200)}…` : json;
  } catch {
    // A cycle or a BigInt inside: name the type instead.
  }
  return value === undefined ? "undefined" : Object.prototype.toString.call(value);
}

/** `invalid_argument` for an argument a caller passed: what it must be, and what it was. */
export function invalid(what: string, expected: string, value: unknown): CheckpointError {
  return new CheckpointError("invalid_argument", `${what} must be ${expected}, got ${shown(value)}`);
}
