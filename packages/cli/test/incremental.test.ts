import { existsSync } from "node:fs";
import { readFile, readdir } from "node:fs/promises";

/** The files (not directories) under `dir`, relative to it. */
async function filesUnder(dir: string): Promise<string[]> {
  return (await readdir(dir, { recursive: true, withFileTypes: true }))
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(dir.length + 1));
}
import { join } from "node:path";
import { type HostTensor, hostTensor, load, readMetadata } from "@cairn/core";
import { CheckpointManager } from "@cairn/manager";
import { describe, expect, it } from "vitest";
import { runCli } from "../src/main.js";
import { pattern, tempDir } from "./helpers.js";
import { readSafetensorsSpec } from "./safetensors-reader.js";

function tensor(seed: number, shape = [64, 32]): HostTensor {
  const t = hostTensor("float32", shape);
  new Uint8Array(t.data.buffer).set(pattern(t.data.byteLength, seed));
  return t;
}

/** State of a step: a frozen tensor that never changes, and one that does. */
function state(step: number): { frozen: HostTensor; trained: HostTensor; step: number } {
  return { frozen: tensor(1, [128, 64]), trained: tensor(step + 100), step };
}

/** A manager root of incremental steps 1, 2, 3 (2 and 3 reference 1's frozen tensor). */
async function incrementalRoot(): Promise<string> {
  const root = join(await tempDir(), "run");
  const mgr = new CheckpointManager(root, 1, { incremental: true, checkpointOnPreemption: false });
  for (const step of [1, 2, 3]) await mgr.save(step, state(step));
  await mgr.close();
  expect(Object.values((await readMetadata(join(root, "3"))).files).some((f) => f.dir === "1")).toBe(true);
  return root;
}

async function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = { text: "", write: (s: string) => ((out.text += s), true) };
  const err = { text: "", write: (s: string) => ((err.text += s), true) };
  const code = await runCli(args, { stdout: out, stderr: err });
  return { code, stdout: out.text, stderr: err.text };
}

describe("the CLI on incremental steps", () => {
  it("verify reads an incremental step; cp and export materialize it: the copy needs nothing of its base", async () => {
    const root = await incrementalRoot();
    expect((await run(["verify", join(root, "3")])).code).toBe(0);
    const copy = join(await tempDir(), "copy");
    const cp = await run(["cp", join(root, "3"), copy]);
    expect(cp.code, cp.stderr).toBe(0);
    const exported = join(await tempDir(), "model.safetensors");
    const ex = await run(["export", join(root, "3"), exported]);
    expect(ex.code, ex.stderr).toBe(0);
    const copied = await readMetadata(copy);
    expect(copied.version).toBe("2.2");
    expect(Object.values(copied.files).every((f) => f.dir === undefined)).toBe(true);
    // The source root goes entirely: the copy and the export still hold every byte.
    expect((await run(["rm", root, "1", "2", "3"])).code).toBe(0);
    expect(await filesUnder(root)).toEqual([]);
    expect(await load(copy)).toEqual(state(3));
    const { tensors } = readSafetensorsSpec(await readFile(exported));
    expect(Buffer.from(tensors.get("frozen")!.bytes).equals(Buffer.from(state(3).frozen.data.buffer))).toBe(true);
    expect(Buffer.from(tensors.get("trained")!.bytes).equals(Buffer.from(state(3).trained.data.buffer))).toBe(true);
  });

  it("rm and gc keep the files a kept step references, and take them with the last step using them", async () => {
    const root = await incrementalRoot();
    const rm1 = await run(["rm", root, "1"]);
    expect(rm1.code, rm1.stderr).toBe(0);
    expect(existsSync(join(root, "1", "metadata.json"))).toBe(false);
    expect(await load(join(root, "2"))).toEqual(state(2));
    expect(await load(join(root, "3"))).toEqual(state(3));
    // gc with a leftover age of 0 sweeps step 1's directory as a leftover, yet keeps what 2 and 3 use; it deletes step 2.
    const gc = await run(["gc", root, "--keep", "1", "--leftover-age", "0"]);
    expect(gc.code, gc.stderr).toBe(0);
    expect(await load(join(root, "3"))).toEqual(state(3));
    expect(existsSync(join(root, "2", "metadata.json"))).toBe(false);
    // rm of the checkpoint itself (not as a step of a root) takes its own files and, now unused, nothing else's.
    const rm3 = await run(["rm", join(root, "3")]);
    expect(rm3.code, rm3.stderr).toBe(0);
    const gc2 = await run(["gc", root, "--leftover-age", "0"]);
    expect(gc2.code, gc2.stderr).toBe(0);
    expect(await filesUnder(root)).toEqual([]);
  });

  it("rm of one checkpoint keeps its files that a sibling references", async () => {
    const root = await incrementalRoot();
    const rm = await run(["rm", join(root, "1")]);
    expect(rm.code, rm.stderr).toBe(0);
    expect(rm.stdout).toContain("that other steps reference");
    expect(await load(join(root, "3"))).toEqual(state(3));
    expect(await load(join(root, "2"))).toEqual(state(2));
  });

  it("an incremental root with maxToKeep does not look broken: ls, verify and inspect count what a step uses", async () => {
    const root = join(await tempDir(), "run");
    const mgr = new CheckpointManager(root, 1, { incremental: true, maxToKeep: 3, checkpointOnPreemption: false });
    // 32 tensors of 16 KiB, two changed per step: a kept step uses parts of many earlier steps' files.
    const tensors: Record<string, HostTensor> = {};
    for (let k = 0; k < 32; k++) tensors[`t${k}`] = tensor(k, [64, 64]);
    for (let step = 1; step <= 12; step++) {
      for (const k of [step % 32, (step * 7 + 3) % 32]) tensors[`t${k}`] = tensor(step * 100 + k, [64, 64]);
      await mgr.save(step, { ...tensors });
    }
    await mgr.close();
    const stateBytes = 32 * 64 * 64 * 4;
    const ls = await run(["ls", root]);
    expect(ls.code, ls.stderr).toBe(0);
    // Deleted steps whose files the kept ones use are "referenced", not leftovers of failed saves.
    expect(ls.stdout).not.toContain("uncommitted");
    expect(ls.stdout).toMatch(/\breferenced\b.*files used by step/);
    const listed = JSON.parse((await run(["ls", root, "--json"])).stdout) as {
      steps: { step: number; state: string; bytes: number; referencedBytes: number }[];
    };
    const kept = listed.steps.filter((s) => s.state === "committed");
    expect(kept.map((s) => s.step)).toEqual([10, 11, 12]);
    for (const s of kept) {
      expect(s.bytes).toBeLessThan(stateBytes / 4);
      expect(s.bytes + s.referencedBytes).toBeGreaterThanOrEqual(stateBytes);
      expect(s.bytes + s.referencedBytes).toBeLessThan(stateBytes * 1.1);
    }
    // verify reads, and inspect reports, the step's state: not every earlier file it touches, whole.
    const verify = JSON.parse((await run(["verify", join(root, "12"), "--json"])).stdout) as {
      ok: boolean;
      bytes: number;
    };
    expect(verify.ok).toBe(true);
    expect(verify.bytes).toBeGreaterThanOrEqual(stateBytes);
    expect(verify.bytes).toBeLessThan(stateBytes * 1.1);
    const inspect = JSON.parse((await run(["inspect", join(root, "12"), "--json"])).stdout) as {
      bytes: number;
      ownBytes: number;
      referencedBytes: number;
    };
    expect(inspect.bytes).toBe(verify.bytes);
    expect(inspect.ownBytes + inspect.referencedBytes).toBe(inspect.bytes);
    expect(inspect.referencedBytes).toBe(kept[2]!.referencedBytes);
  });
});
