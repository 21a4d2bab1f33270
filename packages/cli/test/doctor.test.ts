import { cp, mkdir, readFile, rm, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { type HostTensor, hostTensor, readMetadata } from "@cairn/core";
import { CheckpointManager } from "@cairn/manager";
import { describe, expect, it } from "vitest";
import { cairn, jsonLines, pattern, tempDir } from "./helpers.js";

interface Doctor {
  tiers: string[];
  steps: {
    step: number;
    verified: boolean;
    referencedBy: number[];
    tiers: ({ state: string; verified: boolean | null; damaged: { file?: string; problem: string }[] } | null)[];
  }[];
  newestStep: number | null;
  newestVerified: number | null;
  newestDurable: number | null;
  stepsAtRisk: number | null;
  secondsAtRisk: number | null;
  leftovers: { tier: number; step: number; objects: number; tempObjects: number; tempBytes: number }[];
  ok: boolean;
}

function tensor(seed: number, shape = [64, 32]): HostTensor {
  const t = hostTensor("float32", shape);
  new Uint8Array(t.data.buffer).set(pattern(t.data.byteLength, seed));
  return t;
}

async function doctor(args: string[]): Promise<{ code: number | null; report: Doctor; text: string; stderr: string }> {
  const json = await cairn(["doctor", ...args, "--json"]);
  const text = await cairn(["doctor", ...args]);
  expect(text.code).toBe(json.code);
  return { code: json.code, report: jsonLines(json)[0] as unknown as Doctor, text: text.stdout, stderr: text.stderr };
}

/** Steps 10, 20, 30 of a plain run. */
async function plainRoot(): Promise<string> {
  const root = join(await tempDir(), "run");
  const mgr = new CheckpointManager(root, 10, { checkpointOnPreemption: false });
  for (const step of [10, 20, 30]) await mgr.save(step, { w: tensor(step), step });
  await mgr.close();
  return root;
}

/** The data file holding `step`'s tensor `key`, and the byte offset of its first chunk. */
async function chunkOf(root: string, step: number, key = "w"): Promise<{ path: string; offset: number }> {
  const metadata = await readMetadata(join(root, String(step)));
  const entry = metadata.entries.find((e) => e.key[0] === key);
  if (entry?.kind !== "tensor") throw new Error(`no tensor ${key}`);
  const chunk = entry.chunks[0]!;
  return { path: join(root, metadata.files[chunk.file]!.dir ?? String(step), chunk.file), offset: chunk.byteOffset };
}

async function flipByte(path: string, offset: number): Promise<void> {
  const bytes = await readFile(path);
  bytes[offset]! ^= 0x01;
  await writeFile(path, bytes);
}

describe("cairn doctor", () => {
  it("on a healthy root: every step verified, nothing at risk, no leftovers, exit 0", async () => {
    const root = await plainRoot();
    const { code, report, text } = await doctor([root]);
    expect(code).toBe(0);
    expect(report.steps.map((s) => [s.step, s.verified, s.tiers[0]!.state])).toEqual([
      [10, true, "committed"],
      [20, true, "committed"],
      [30, true, "committed"],
    ]);
    expect(report).toMatchObject({ newestStep: 30, newestVerified: 30, newestDurable: 30, stepsAtRisk: 0, ok: true });
    expect(report.leftovers).toEqual([]);
    expect(text).toContain("newest step: 30, verified");
    expect(text).toMatch(/^30\s+verified\s+-$/m);
  });

  it("on tiers: the newest durable step is the newest verified on the last tier, with the distance to the newest", async () => {
    const dir = await tempDir();
    const [local, bucket] = [join(dir, "local"), join(dir, "bucket")];
    const mgr = new CheckpointManager([local, bucket], 10, {
      checkpointOnPreemption: false,
      tiers: [{}, { every: 20 }],
    });
    for (const step of [10, 20, 30]) await mgr.save(step, { w: tensor(step), step });
    await mgr.close();
    const { code, report, text } = await doctor([local, bucket]);
    expect(code).toBe(0);
    expect(report.steps.map((s) => [s.step, s.tiers.map((c) => c?.verified ?? null)])).toEqual([
      [10, [true, null]],
      [20, [true, true]],
      [30, [true, null]],
    ]);
    expect(report).toMatchObject({ newestStep: 30, newestVerified: 30, newestDurable: 20, stepsAtRisk: 10 });
    expect(report.secondsAtRisk).toBeGreaterThanOrEqual(0);
    expect(text).toMatch(/newest durable step \(tier 1\): 20, 10 steps and [\d.]+ s behind the newest/);
  });

  it("on a damaged root: a flipped byte in an older step is reported (exit 0); a truncated newest step is exit 3", async () => {
    const root = await plainRoot();
    const older = await chunkOf(root, 20);
    await flipByte(older.path, older.offset + 5);
    const first = await doctor([root]);
    expect(first.code).toBe(0);
    expect(first.report.steps.map((s) => s.verified)).toEqual([true, false, true]);
    expect(first.report.steps[1]!.tiers[0]!.damaged.some((d) => d.problem.includes("w"))).toBe(true);
    expect(first.text).toMatch(/^20\s+DAMAGED/m);
    expect(first.text).toContain("problems:");
    const newest = await chunkOf(root, 30);
    await truncate(newest.path, newest.offset + 10);
    const second = await doctor([root]);
    expect(second.code).toBe(3);
    expect(second.report).toMatchObject({ newestStep: 30, newestVerified: 10, ok: false });
    expect(second.report.steps[2]!.tiers[0]!.damaged.some((d) => d.problem.includes("truncated"))).toBe(true);
    expect(second.text).toContain("newest step: 30, DOES NOT VERIFY");
    expect(second.stderr).toContain("newest step 30 does not verify");
    // A metadata.json that cannot be parsed is damage too.
    await writeFile(join(root, "30", "metadata.json"), "{ not json");
    const third = await doctor([root]);
    expect(third.code).toBe(3);
    expect(third.report.steps[2]!.tiers[0]!.state).toBe("damaged");
  });

  it("on an incremental root with deleted bases: kept steps verify through their bases, which are referenced, not leftovers", async () => {
    const root = join(await tempDir(), "run");
    const mgr = new CheckpointManager(root, 1, { incremental: true, maxToKeep: 2, checkpointOnPreemption: false });
    for (const step of [1, 2, 3, 4]) await mgr.save(step, { frozen: tensor(1, [128, 64]), trained: tensor(step) });
    await mgr.close();
    // Leftovers: a save that never committed, with a temp file of a killed write.
    await mkdir(join(root, "5"));
    await writeFile(join(root, "5", ".cairn-tmp-data-r0-0-aaaaaaaaaaaa.safetensors-0123456789ab"), pattern(300));
    const { code, report, text } = await doctor([root]);
    expect(code, text).toBe(0);
    const states = Object.fromEntries(report.steps.map((s) => [s.step, s.tiers[0]!.state]));
    expect(states).toEqual({ 1: "referenced", 3: "committed", 4: "committed", 5: "uncommitted" });
    expect(report.steps.find((s) => s.step === 1)!.referencedBy).toEqual([3, 4]);
    expect(report).toMatchObject({ newestStep: 4, newestVerified: 4, ok: true });
    expect(report.leftovers.map((l) => [l.step, l.tempObjects])).toContainEqual([5, 1]);
    expect(text).toMatch(/step 5: 1 object, 300 B, of which 1 temp file/);
    // Damage in the deleted base's bytes damages every kept step that uses them: the newest no longer verifies.
    const base = await chunkOf(root, 4, "frozen");
    expect(base.path).toContain(join(root, "1"));
    await flipByte(base.path, base.offset + 100);
    const damaged = await doctor([root]);
    expect(damaged.code).toBe(3);
    expect(damaged.report.steps.filter((s) => s.tiers[0]!.verified === false).map((s) => s.step)).toEqual([3, 4]);
    expect(damaged.report.newestVerified).toBeNull();
  });

  it("a step directory holding another step's checkpoint (copied by hand) is damaged: its bytes verify, its weights are not its own", async () => {
    const root = await plainRoot();
    await rm(join(root, "30"), { recursive: true });
    await cp(join(root, "20"), join(root, "30"), { recursive: true });
    const { code, report, text } = await doctor([root]);
    expect(code).toBe(3);
    expect(report).toMatchObject({ newestStep: 30, newestVerified: 20, ok: false });
    expect(report.steps[2]!.tiers[0]!.state).toBe("damaged");
    expect(report.steps[2]!.tiers[0]!.damaged[0]!.problem).toMatch(/metadata of step 20, not of step 30/);
    expect(text).toMatch(/^30\s+DAMAGED/m);
  });

  it("of a location holding nothing fails with exit 1; the listing is read-only", async () => {
    const empty = join(await tempDir(), "none");
    expect((await cairn(["doctor", empty])).code).toBe(1);
  });
});
