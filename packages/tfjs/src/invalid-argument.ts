import { CheckpointError, describeValue } from "@cairn/core";

/** `invalid_argument` for an argument a caller passed: what it must be, and what it was. */
export function invalid(what: string, expected: string, value: unknown): CheckpointError {
  return new CheckpointError("invalid_argument", `${what} must be ${expected}, got ${describeValue(value)}`);
}
