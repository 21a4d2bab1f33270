import type { EntryMetadata } from "@cairn/core/format";
import { describe, expect, it } from "vitest";
import { FitPosition } from "./fit-position.js";

const WHERE = "step 28 under memory://run";

/** The value entries a saved position has, as metadata.json holds them. */
function entriesOf(position: FitPosition): EntryMetadata[] {
  const entries: EntryMetadata[] = [];
  const walk = (value: unknown, key: string[]): void => {
    if (typeof value === "object" && value !== null) {
      for (const [k, v] of Object.entries(value)) walk(v, [...key, k]);
    } else entries.push({ kind: "value", key, value: value as never });
  };
  walk(position.stateDict(), ["fit"]);
  return entries;
}

function saved(): FitPosition {
  const position = new FitPosition(
    { kind: "fitDataset", batchesPerEpoch: null, samples: null, batchSize: null, shuffle: null },
    7,
    3,
  );
  Object.assign(position, { step: 28, epoch: 1, batch: 8 });
  position.data = { iterations: 2, taken: 8, open: true };
  return position;
}

const replace = (entries: EntryMetadata[], key: string, value: unknown): EntryMetadata[] =>
  entries.map((e) => (e.key.join(".") === key ? ({ ...e, value } as EntryMetadata) : e));

describe("FitPosition from a checkpoint's entries", () => {
  it("round-trips", () => {
    const back = FitPosition.fromEntries(
      [{ kind: "value", key: ["model", "x"], value: 1 }, ...entriesOf(saved())],
      WHERE,
    );
    expect(back.stateDict()).toEqual(saved().stateDict());
  });

  it("names what is missing and what is unexpected", () => {
    const entries = entriesOf(saved()).filter((e) => e.key.join(".") !== "fit.data.open");
    entries.push({ kind: "value", key: ["fit", "__proto__"], value: 1 });
    entries.push({ kind: "tensor", key: ["fit", "step"], dtype: "float32", shape: [], chunks: [] } as EntryMetadata);
    expect(() =>
      FitPosition.fromEntries(
        entries.filter((e) => !(e.kind === "value" && e.key[1] === "step")),
        WHERE,
      ),
    ).toThrow(
      `${WHERE} holds a fit entry of another layout (missing fit.step, fit.data.open; unexpected fit.__proto__, fit.step): it was saved by another version or another program; use another root`,
    );
    expect(Object.prototype).not.toHaveProperty("step");
  });

  it("says when there is no fit entry at all", () => {
    expect(() => FitPosition.fromEntries([{ kind: "value", key: ["model", "x"], value: 1 }], WHERE)).toThrow(
      `${WHERE} has no fit entry: it was not saved by cairnCheckpoint's fit or fitDataset`,
    );
  });

  it.each([
    ["fit.format", 2, "the checkpoint's fit.format is 2, not 1"],
    ["fit.kind", "loop", `the checkpoint's fit.kind is "loop", not "fit" or "fitDataset"`],
    ["fit.step", -1, "the checkpoint's fit.step is -1, not an integer ≥ 0"],
    ["fit.epoch", 1.5, "the checkpoint's fit.epoch is 1.5, not an integer ≥ 0"],
    ["fit.finished", "no", `the checkpoint's fit.finished is "no", not true or false`],
    ["fit.seed", 2 ** 60, "the checkpoint's fit.seed is 1152921504606847000, not a safe integer"],
    ["fit.layout.shuffle", 1, "the checkpoint's fit.layout.shuffle is 1, not true, false or null"],
    ["fit.layout.batchSize", "8", `the checkpoint's fit.layout.batchSize is "8", not an integer ≥ 0`],
    ["fit.data.open", null, "fit.data is not a data position"],
  ])("refuses %s = %j", (key, value, message) => {
    expect(() => FitPosition.fromEntries(replace(entriesOf(saved()), key, value), WHERE)).toThrow(message);
  });

  it("refuses a special number (NaN) as another layout", () => {
    const entries = entriesOf(saved()).map((e) =>
      e.key.join(".") === "fit.step" ? ({ kind: "value", key: e.key, special: "NaN" } as EntryMetadata) : e,
    );
    expect(() => FitPosition.fromEntries(entries, WHERE)).toThrow("(missing fit.step; unexpected fit.step)");
  });
});
