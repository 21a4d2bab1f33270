import { describe, expect, it } from "vitest";
import {
  type CheckpointErrorCode,
  CheckpointError,
  describeValue,
  isCheckpointErrorCode,
  isDamaged,
  isGone,
  isInterrupted,
  isPermanent,
  isStorageFailure,
  isTransient,
  isUnusable,
} from "./errors.js";

const PREDICATES = { isGone, isDamaged, isUnusable, isStorageFailure, isInterrupted, isPermanent } as const;

/** Every code and the predicates that hold for it: a new code fails the typecheck until it is placed here. */
const EXPECTED: Record<CheckpointErrorCode, readonly (keyof typeof PREDICATES)[]> = {
  not_found: ["isGone", "isUnusable", "isPermanent"],
  not_committed: ["isGone", "isUnusable", "isPermanent"],
  corrupt: ["isDamaged", "isUnusable", "isPermanent"],
  unsupported_version: ["isDamaged", "isUnusable", "isPermanent"],
  invalid_argument: ["isPermanent"],
  mismatch: ["isPermanent"],
  already_exists: ["isPermanent"],
  unsupported_protocol: ["isPermanent"],
  storage: ["isStorageFailure"],
  timeout: ["isStorageFailure"],
  permission_denied: ["isStorageFailure"],
  no_space: ["isStorageFailure"],
  cancelled: ["isInterrupted"],
  process_group: ["isInterrupted"],
};

describe("error categories", () => {
  for (const [code, holding] of Object.entries(EXPECTED) as [CheckpointErrorCode, readonly string[]][]) {
    it(`${code}: ${holding.join(", ")}`, () => {
      const error = new CheckpointError(code, "x");
      const held = Object.entries(PREDICATES)
        .filter(([, predicate]) => predicate(error))
        .map(([name]) => name);
      expect(held.sort()).toEqual([...holding].sort());
      expect(isCheckpointErrorCode(code)).toBe(true);
    });
  }

  it("hold for no value that is not a CheckpointError, whatever its code says", () => {
    for (const value of [
      new Error("x"),
      { code: "not_found" },
      Object.assign(new Error("x"), { code: "storage" }),
      null,
    ])
      for (const predicate of [...Object.values(PREDICATES), isTransient]) expect(predicate(value)).toBe(false);
  });

  it("a code from elsewhere is checked, prototype names included", () => {
    for (const value of ["__proto__", "toString", "constructor", "NOT_FOUND", "", 3, null, undefined, {}])
      expect(isCheckpointErrorCode(value)).toBe(false);
  });

  it("transient: only a storage error its adapter marked so", () => {
    expect(isTransient(new CheckpointError("storage", "x", { context: { transient: true } }))).toBe(true);
    expect(isTransient(new CheckpointError("storage", "x"))).toBe(false);
    expect(isTransient(new CheckpointError("timeout", "x", { context: { transient: true } }))).toBe(false);
  });
});

describe("describeValue", () => {
  it("shows short primitives with their type, objects by their class, and never walks or throws", () => {
    const trap = new Proxy(
      {},
      {
        getPrototypeOf: () => {
          throw new Error("trap");
        },
      },
    );
    const cases: [unknown, string][] = [
      [null, "null"],
      [undefined, "undefined"],
      ["m", 'the string "m"'],
      ["x".repeat(100), `the string "${"x".repeat(80)}…"`],
      [-1, "the number -1"],
      [5n, "the bigint 5"],
      [true, "the boolean true"],
      [() => 1, "a function"],
      [Symbol("s"), "a symbol"],
      [[1, 2, 3], "an array of length 3"],
      [{ a: 1 }, "an object"],
      [Object.create(null), "an object"],
      [new Map(), "a Map"],
      [new Float32Array(2), "a Float32Array"],
      [trap, "an object"],
    ];
    for (const [value, shown] of cases) expect(describeValue(value)).toBe(shown);
  });
});
