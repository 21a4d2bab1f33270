import { existsSync } from "node:fs";
import { mkdir, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  type HostTensor,
  type StorageAdapter,
  CheckpointError,
  hostTensor,
  openStorage,
  readMetadata,
} from "@cairn/core";
import { FaultyStorageAdapter } from "@cairn/core/testing";
import { CheckpointManager, listSteps, removeSteps } from "@cairn/manager";
import { cairnIO } from "@cairn/tfjs";
import { describe, expect, it } from "vitest";
import { runCli } from "../src/main.js";
import { cairn, jsonLines, pattern, tempDir, withStorage, writeShardedCheckpoint } from "./helpers.js";
import { writeSafetensorsSpec } from "./safetensors-reader.js";

function tensor(seed: number, shape = [8, 4]): HostTensor {
  const t = hostTensor("float32", shape);
  new Uint8Array(t.data.buffer).set(pattern(t.data.byteLength, seed));
  return t;
}

function io(): {
  stdout: { write: (s: string) => boolean; text: string };
  stderr: { write: (s: string) => boolean; text: string };
  keepsMemory: true;
} {
  const make = (): { write: (s: string) => boolean; text: string } => {
    const out = { text: "", write: (s: string) => ((out.text += s), true) };
    return out;
  };
  return { stdout: make(), stderr: make(), keepsMemory: true };
}

/** Nothing reached Object.prototype: no key any crafted input named appeared on a fresh object. */
function expectPrototypeClean(): void {
  const probe = {} as Record<string, unknown>;
  for (const key of ["x", "polluted", "weight", "w", "kernel"]) expect(probe[key], key).toBeUndefined();
  expect(Object.keys(Object.prototype)).toEqual([]);
}

/** A manager root with steps 10, 20, 30 (loss 0.1 + 0.2, 0.5, 0.25). */
async function managerRoot(): Promise<string> {
  const root = join(await tempDir(), "run");
  const mgr = new CheckpointManager(root, 10, { checkpointOnPreemption: false });
  for (const [step, loss] of [
    [10, 0.1 + 0.2],
    [20, 0.5],
    [30, 0.25],
  ] as const)
    await mgr.save(step, { w: tensor(step) }, { metrics: { loss } });
  await mgr.close();
  return root;
}

/** A checkpoint written by hand (core's save refuses such keys) whose one tensor has the key path `key`. */
async function crafted(dir: string, key: string[]): Promise<void> {
  const global = pattern(16, 3);
  await withStorage(dir, (storage) =>
    writeShardedCheckpoint(
      storage,
      [{ key, dtype: "float32", shape: [4], global, boxes: [{ offsets: [0], sizes: [4] }] }],
      { blockSize: 64, files: 1 },
    ),
  );
}

/** Rewrites a step's metadata.json through `edit` of its text. */
async function editMetadata(dir: string, edit: (text: string) => string): Promise<void> {
  const path = join(dir, "metadata.json");
  await writeFile(path, edit(await readFile(path, "utf8")));
}

describe("keys that reach a prototype, from any stored input, are refused by name", () => {
  it("import of a foreign safetensors file whose tensor names split into __proto__, constructor or prototype: invalid_argument, nothing committed, nothing polluted", async () => {
    const dir = await tempDir();
    for (const name of ["__proto__.x", "model.constructor.weight", "prototype"]) {
      const file = join(dir, `${name}.safetensors`);
      await writeFile(file, writeSafetensorsSpec([{ name, dtype: "F32", shape: [2], bytes: pattern(8) }]));
      const out = io();
      expect(await runCli(["import", file, join(dir, `ckpt-${name}`), "--json"], out), out.stderr.text).toBe(1);
      expect(JSON.parse(out.stdout.text)).toMatchObject({
        error: {
          code: "invalid_argument",
          message: expect.stringMatching(
            /tensor name .* would be the key path .*: the key "(__proto__|constructor|prototype)" is not allowed/,
          ),
        },
      });
      expect(existsSync(join(dir, `ckpt-${name}`, "metadata.json"))).toBe(false);
    }
    expectPrototypeClean();
  });

  it("import of an exported file whose __metadata__.cairn names a __proto__ key path or holds a __proto__ key is refused as corrupt (exit 3)", async () => {
    const dir = await tempDir();
    const cases = {
      path: { version: 1, entries: [{ name: "w", key: ["__proto__", "polluted"], kind: "tensor" }], user: {} },
      user: JSON.parse(
        '{"version":1,"entries":[{"name":"w","key":["w"],"kind":"tensor"}],"user":{"__proto__":{"polluted":1}}}',
      ) as unknown,
      value: JSON.parse(
        '{"version":1,"entries":[{"name":"w","key":["w"],"kind":"tensor"},{"kind":"value","key":["constructor"],"value":1}],"user":{}}',
      ) as unknown,
    };
    for (const [label, layout] of Object.entries(cases)) {
      const file = join(dir, `${label}.safetensors`);
      // JSON.stringify keeps an own "__proto__" key as JSON.parse made it.
      await writeFile(
        file,
        writeSafetensorsSpec([{ name: "w", dtype: "F32", shape: [2], bytes: pattern(8) }], {
          format: "pt",
          cairn: JSON.stringify(layout),
        }),
      );
      const out = io();
      expect(await runCli(["import", file, join(dir, `ckpt-${label}`)], out), label).toBe(3);
      expect(out.stderr.text, label).toMatch(/__metadata__\.cairn .*(__proto__|constructor)/);
      expect(existsSync(join(dir, `ckpt-${label}`, "metadata.json"))).toBe(false);
    }
    expectPrototypeClean();
  });

  it("from-tfjs refuses a weight named __proto__ and a model.json holding a __proto__ key; cairnIO refuses to save such a weight", async () => {
    const dir = await tempDir();
    await writeFile(join(dir, "w.bin"), pattern(16));
    const model = (weight: string, topology: string): string =>
      `{"modelTopology":${topology},"format":"layers-model","weightsManifest":[{"paths":["w.bin"],"weights":[{"name":${JSON.stringify(weight)},"shape":[4],"dtype":"float32"}]}]}`;
    await writeFile(join(dir, "weight.json"), model("__proto__", '{"class_name":"Sequential"}'));
    await writeFile(
      join(dir, "topology.json"),
      model("d/kernel", '{"class_name":"Sequential","config":{"__proto__":{"polluted":true}}}'),
    );
    const weight = io();
    expect(await runCli(["from-tfjs", join(dir, "weight.json"), join(dir, "a")], weight)).toBe(1);
    expect(weight.stderr.text).toMatch(/weight __proto__: the key "__proto__" is not allowed/);
    const topology = io();
    expect(await runCli(["from-tfjs", join(dir, "topology.json"), join(dir, "b")], topology)).toBe(1);
    expect(topology.stderr.text).toMatch(
      /topology\.json is not a tfjs model\.json: the key "__proto__" is not allowed/,
    );
    expect(existsSync(join(dir, "a")) || existsSync(join(dir, "b"))).toBe(false);

    const handler = cairnIO(join(dir, "io"));
    await expect(
      handler.save!({
        modelTopology: {},
        weightSpecs: [{ name: "__proto__", shape: [4], dtype: "float32" }],
        weightData: pattern(16).buffer as ArrayBuffer,
      }),
    ).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining('the key "__proto__" is not allowed'),
    });
    expectPrototypeClean();
  });

  it("verify reports a checkpoint whose metadata.json holds a __proto__ key path as damaged, naming the key (exit 3), never ok", async () => {
    const dir = join(await tempDir(), "ckpt");
    await crafted(dir, ["__proto__", "polluted"]);
    const run = await cairn(["verify", dir, "--json"]);
    expect(run.code).toBe(3);
    expect(jsonLines(run)[0]).toMatchObject({
      ok: false,
      damaged: [{ file: "metadata.json", problem: expect.stringContaining("__proto__") }],
    });
    expect(jsonLines(run)[1]).toMatchObject({
      error: { code: "corrupt", message: expect.stringContaining("__proto__") },
    });
  });
});

describe("one bad step is reported, never allowed to stop the rest", () => {
  it("ls lists every step, marking a damaged, a foreign and a __proto__ step with its reason; --json has error {code, message}; exit 3", async () => {
    const root = await managerRoot();
    await editMetadata(join(root, "10"), () => "{ not json");
    await rm(join(root, "20"), { recursive: true });
    await crafted(join(root, "20"), ["__proto__", "polluted"]);
    await mkdir(join(root, "25"));
    await writeFile(join(root, "25", "metadata.json"), JSON.stringify({ format: "someone-else", version: "1.0" }));
    const run = await cairn(["ls", root]);
    expect(run.code).toBe(3);
    const lines = run.stdout.trim().split("\n");
    expect(lines[1]).toMatch(/^10\s+damaged\s+.*not valid JSON/);
    expect(lines[2]).toMatch(/^20\s+damaged\s+.*__proto__/);
    expect(lines[3]).toMatch(/^25\s+damaged\s+.*not a cairn-checkpoint metadata file/);
    expect(lines[4]).toMatch(/^30\s+committed\s+.*loss=0\.25$/);
    expect(run.stderr).toMatch(
      /^cairn ls: 3 of 4 steps could not be read under file:\/\/\S+run: step 10 \(.*\); step 20 \(.*\); step 25 \(.*\)\n$/,
    );
    const json = await cairn(["ls", root, "--json"]);
    const steps = (
      jsonLines(json)[0] as { steps: { step: number; committed: boolean; error?: { code: string; message: string } }[] }
    ).steps;
    expect(steps.map((s) => [s.step, s.error?.code])).toEqual([
      [10, "corrupt"],
      [20, "corrupt"],
      [25, "corrupt"],
      [30, undefined],
    ]);
    expect(jsonLines(json)[1]).toMatchObject({ error: { code: "corrupt" } });
  });

  it("a step whose metadata.json cannot be read (permission denied) is marked with that code; the others are listed", async () => {
    const root = await managerRoot();
    const storage = await openStorage(root);
    const denied = new FaultyStorageAdapter(storage, [
      {
        operation: "read",
        times: 100,
        path: (p) => p === "20/metadata.json",
        error: () => new CheckpointError("permission_denied", "[file] reading 20/metadata.json: EACCES"),
      },
    ]);
    const { steps } = await listSteps(denied);
    await storage.close();
    expect(steps.map((s) => [s.step, s.committed, s.error?.code])).toEqual([
      [10, true, undefined],
      [20, true, "permission_denied"],
      [30, true, undefined],
    ]);
    expect(steps[0]!.metrics).toEqual({ loss: 0.1 + 0.2 });
  });

  it("gc applies retention to the readable steps and skips a damaged one, reporting it (exit 3); rm of several deletes every step it can", async () => {
    const root = await managerRoot();
    await editMetadata(join(root, "20"), () => "{ not json");
    const gc = await cairn(["gc", root, "--keep", "1", "--json"]);
    expect(gc.code).toBe(3);
    expect(jsonLines(gc)[0]).toMatchObject({
      deletedSteps: [10],
      damaged: [{ step: 20, code: "corrupt" }],
      failed: [],
    });
    expect((await readdir(root)).sort()).toEqual(["20", "30"]);

    const again = await managerRoot();
    const storage = await openStorage(again);
    const faulty = new FaultyStorageAdapter(storage, [
      { operation: "delete", times: 100, path: (p) => p.startsWith("10/") },
    ]);
    const result = await removeSteps(faulty as StorageAdapter, [10, 20, 30]);
    await storage.close();
    expect(result.deleted).toEqual([20, 30]);
    expect(result.failed).toMatchObject([{ step: 10, code: "storage" }]);
    expect((await readdir(again)).sort()).toEqual(["10"]);
    expect((await readMetadata(join(again, "10"))).user).toBeDefined();
  });
});

describe("smaller things", () => {
  it("ls prints metrics to six significant digits; --json keeps them in full", async () => {
    const root = await managerRoot();
    const run = await cairn(["ls", root, "--then", "ls", root, "--json"]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout.split("\n")[1]).toMatch(/^10\s+committed\s+.*\sloss=0\.3$/);
    const json = JSON.parse(run.stdout.trim().split("\n").at(-1)!) as { steps: { metrics: { loss: number } }[] };
    expect(json.steps[0]!.metrics.loss).toBe(0.1 + 0.2);
  });

  it("a mistyped command suggests the nearest one", async () => {
    const out = io();
    expect(await runCli(["verfy", "x"], out)).toBe(2);
    expect(out.stderr.text).toMatch(/^cairn: unknown command "verfy"; did you mean verify\? commands: ls, /);
    const far = io();
    expect(await runCli(["frobnicate"], far)).toBe(2);
    expect(far.stderr.text).not.toContain("did you mean");
  });
});
