import { CheckpointError, type StateDict, hostTensor } from "@cairn/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import { MetadataPreemptionSource } from "../preemption/metadata-preemption.js";

const root = `memory://manager-arguments/${process.pid}`;
let mgr: CheckpointManager;
beforeAll(async () => {
  mgr = new CheckpointManager(root, 1, { checkpointOnPreemption: false });
  await mgr.save(1, state());
});
afterAll(() => mgr.close());

function state(): StateDict {
  return { w: hostTensor("float32", [2], Float32Array.of(1, 2)) };
}

const cyclic: Record<string, unknown> = {};
cyclic.self = cyclic;
const nullProto = Object.create(null) as object;
const any = (value: unknown): never => value as never;

/** [what is called, the call, a fragment the message must hold (the offending value as shown)]. */
const CASES: [string, () => unknown, string][] = [
  ["save with a fractional step", () => mgr.save(1.5, state()), "got the number 1.5"],
  ["save with a string step", () => mgr.save(any("3"), state()), 'got the string "3"'],
  ["save with NaN", () => mgr.save(NaN, state()), "got the number NaN"],
  ["save with a step past 2^53", () => mgr.save(2 ** 53, state()), `got the number ${2 ** 53}`],
  ["save with a null-prototype step", () => mgr.save(any(nullProto), state()), "got an object"],
  ["save with a BigInt step", () => mgr.save(any(3n), state()), "got the bigint 3"],
  ["save without a state dict", () => mgr.save(2, any(undefined)), "got undefined"],
  ["save with a null state dict", () => mgr.save(2, any(null)), "got null"],
  ["save with a number for a state dict", () => mgr.save(2, any(5)), "got the number 5"],
  ["save with an array for a state dict", () => mgr.save(2, any([1, 2])), "got an array of length 2"],
  ["save with null options", () => mgr.save(2, state(), any(null)), "save options must be an object, got null"],
  [
    "save with a string force",
    () => mgr.save(2, state(), any({ force: "yes" })),
    'force must be a boolean, got the string "yes"',
  ],
  [
    "save with a numeric overwrite",
    () => mgr.save(2, state(), any({ overwrite: 1 })),
    "overwrite must be a boolean, got the number 1",
  ],
  [
    "save with a Map for metadata",
    () => mgr.save(2, state(), any({ metadata: new Map() })),
    "metadata must be a plain object",
  ],
  ["save with cyclic metadata", () => mgr.save(2, state(), { metadata: cyclic }), "JSON-serialisable"],
  ["save with BigInt metadata", () => mgr.save(2, state(), { metadata: { n: 1n } }), "JSON-serialisable"],
  [
    "save with a string metric",
    () => mgr.save(2, state(), any({ metrics: { loss: "low" } })),
    'metrics.loss must be a finite number, got the string "low"',
  ],
  [
    "save with a NaN metric",
    () => mgr.save(2, state(), { metrics: { loss: NaN } }),
    "metrics.loss must be a finite number, got the number NaN",
  ],
  ["save with metrics as an array", () => mgr.save(2, state(), any({ metrics: [1] })), "got an array of length 1"],
  ["saveAsync with a negative step", () => mgr.saveAsync(-1, state()), "got the number -1"],
  ["saveAsync with a string state dict", () => mgr.saveAsync(2, any("w")), 'got the string "w"'],
  ["saveAsync with numeric options", () => mgr.saveAsync(2, state(), any(7)), "got the number 7"],
  ["restore with a negative step", () => mgr.restore(-1), "got the number -1"],
  ["restore into null", () => mgr.restore(1, any(null)), "restore target must be an object"],
  ["restore into a number", () => mgr.restore(1, any(4)), "got the number 4"],
  [
    "restore with null options",
    () => mgr.restore(1, state(), any(null)),
    "restore options must be an object, got null",
  ],
  [
    "restore with a string partial",
    () => mgr.restore(1, state(), any({ partial: "yes" })),
    'partial must be a boolean, got the string "yes"',
  ],
  [
    "restore with a signal that is not one",
    () => mgr.restore(1, state(), any({ signal: {} })),
    "signal must be an AbortSignal, got an object",
  ],
  ["metadata of a fractional step", () => mgr.metadata(0.5), "got the number 0.5"],
  ["delete of a string step", () => mgr.delete(any("1")), 'got the string "1"'],
  ["shouldSave of undefined", () => mgr.shouldSave(any(undefined)), "got undefined"],
  ["reachedPreemption of -2", () => mgr.reachedPreemption(-2), "got the number -2"],
  ["on an unknown event", () => mgr.on(any("saved"), () => undefined), 'got the string "saved"'],
  [
    "on without a listener",
    () => mgr.on("error", any("log")),
    'the listener for error must be a function, got the string "log"',
  ],
  ["construct at null", () => new CheckpointManager(any(null), 1), "URL, a path or a StorageAdapter"],
  [
    "construct with a BigInt maxToKeep",
    () => new CheckpointManager(root, 1, any({ maxToKeep: 3n })),
    "maxToKeep must be an integer >= 0, got the bigint 3",
  ],
  [
    "construct with a cyclic option value",
    () => new CheckpointManager(root, 1, any({ keepTimeInterval: cyclic })),
    "keepTimeInterval must be a positive number of ms, got an object",
  ],
  [
    "construct with a signalTarget without on/off",
    () => new CheckpointManager(root, 1, any({ signalTarget: {} })),
    "signalTarget must be an object with on and off",
  ],
  ["construct with null options", () => new CheckpointManager(root, 1, any(null)), "got null"],
  [
    "a metadata source with no URL",
    () => new MetadataPreemptionSource(any({})),
    "url must be an http:// or https:// URL, got undefined",
  ],
  ["a metadata source on ftp", () => new MetadataPreemptionSource({ url: "ftp://x/y" }), 'got the string "ftp://x/y"'],
  [
    "a metadata source with a zero interval",
    () => new MetadataPreemptionSource({ url: "http://127.0.0.1/", intervalMs: 0 }),
    "intervalMs must be a positive number of ms up to 2147483647, got the number 0",
  ],
  [
    "an AWS source with too long a token TTL",
    () => MetadataPreemptionSource.awsSpot({ tokenTtlSeconds: 86400 }),
    "tokenTtlSeconds must be an integer from 1 to 21600, got the number 86400",
  ],
];

describe("CheckpointManager arguments", () => {
  it.each(CASES)("%s is invalid_argument naming the value, never a TypeError", async (_, call, fragment) => {
    let thrown: unknown;
    try {
      await call();
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(CheckpointError);
    expect(thrown).toMatchObject({ code: "invalid_argument", message: expect.stringContaining(fragment) });
  });

  it("keeps the cause of a refused value, and what was saved is intact", async () => {
    const error = await mgr.save(2, state(), { metadata: cyclic }).catch((e: unknown) => e);
    expect((error as Error).cause).toBeInstanceOf(TypeError);
    expect(await mgr.allSteps()).toEqual([1]);
  });
});
