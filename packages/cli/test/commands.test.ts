import { existsSync } from "node:fs";
import { cp, readFile, readdir, rm, truncate, utimes, writeFile, mkdir } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type HostTensor, hostTensor, load, readMetadata, save } from "@cairn/core";
import { CheckpointManager } from "@cairn/manager";
import { describe, expect, it } from "vitest";
import { COMMANDS } from "../src/main.js";
import { cairn, jsonLines, pattern, tempDir } from "./helpers.js";

function tensor(seed: number, shape = [64, 32]): HostTensor {
  const t = hostTensor("float32", shape);
  new Uint8Array(t.data.buffer).set(pattern(t.data.byteLength, seed));
  return t;
}

/** A manager root with steps 10, 20, 30 (loss 0.3, 0.1, 0.2) and a leftover directory 40. */
async function managerRoot(): Promise<string> {
  const root = join(await tempDir(), "run");
  const mgr = new CheckpointManager(root, 10, { checkpointOnPreemption: false });
  for (const [step, loss] of [
    [10, 0.3],
    [20, 0.1],
    [30, 0.2],
  ] as const)
    await mgr.save(step, { model: { w: tensor(step) }, step }, { metrics: { loss } });
  await mgr.close();
  await mkdir(join(root, "40"));
  await writeFile(join(root, "40", "data-r0-0-aaaaaaaaaaaa.safetensors"), pattern(100));
  return root;
}

async function flipByte(path: string, offset: number): Promise<void> {
  const bytes = await readFile(path);
  bytes[offset]! ^= 0x01;
  await writeFile(path, bytes);
}

async function checkpoint(): Promise<{ dir: string; file: string; dataOffset: number; headerLength: number }> {
  const dir = join(await tempDir(), "ckpt");
  await save({ model: { w: tensor(1), b: tensor(2, [32]) }, step: 3 }, { checkpointId: dir, blockSize: 1024 });
  const metadata = await readMetadata(dir);
  const entry = metadata.entries[0]!;
  if (entry.kind !== "tensor") throw new Error("model.w is a tensor");
  return {
    dir,
    file: entry.chunks[0]!.file,
    dataOffset: entry.chunks[0]!.byteOffset,
    headerLength: metadata.files[entry.chunks[0]!.file]!.headerLength,
  };
}

describe("cairn ls, inspect", () => {
  it("ls lists committed steps with size, time and metrics, and leftovers; --json for scripts", async () => {
    const root = await managerRoot();
    const run = await cairn(["ls", root]);
    expect(run.code, run.stderr).toBe(0);
    const lines = run.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^STEP\s+STATE\s+WRITTEN\s+REFERENCED\s+TIME\s+METRICS$/);
    expect(lines[1]).toMatch(/^10\s+committed\s+\d+\.\d KiB\s+-\s+\d{4}-\d\d-\d\dT\S+Z\s+loss=0\.3$/);
    expect(lines[4]).toMatch(/^40\s+uncommitted\s+100 B/);
    expect(run.stdout).not.toContain("\r");
    const json = jsonLines(await cairn(["ls", root, "--json"]))[0] as {
      steps: { step: number; committed: boolean; bytes: number; metrics: object }[];
    };
    expect(json.steps.map((s) => [s.step, s.committed])).toEqual([
      [10, true],
      [20, true],
      [30, true],
      [40, false],
    ]);
    expect(json.steps[1]!.metrics).toEqual({ loss: 0.1 });
    expect(json.steps[0]!.bytes).toBeGreaterThan(64 * 32 * 4);
  });

  it("ls of several roots (a tiered manager's tiers) shows one state column per tier", async () => {
    const dir = await tempDir();
    const [local, bucket] = [join(dir, "local"), join(dir, "bucket")];
    const mgr = new CheckpointManager([local, bucket], 10, {
      checkpointOnPreemption: false,
      tiers: [{}, { every: 20 }],
    });
    for (const step of [10, 20, 30])
      await mgr.save(step, { model: { w: tensor(step) }, step }, { metrics: { loss: step / 100 } });
    await mgr.close();
    await rm(join(local, "20"), { recursive: true });
    const run = await cairn(["ls", local, bucket]);
    expect(run.code, run.stderr).toBe(0);
    const lines = run.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^tier 0: file:\/\/.*local$/);
    expect(lines[2]).toMatch(/^STEP\s+TIER 0\s+TIER 1\s+WRITTEN\s+REFERENCED\s+TIME\s+METRICS$/);
    expect(lines[3]).toMatch(/^10\s+committed\s+-\s+\d+\.\d KiB\s+-\s+\S+\s+loss=0\.1$/);
    expect(lines[4]).toMatch(/^20\s+-\s+committed\s+.*loss=0\.2$/);
    expect(lines[5]).toMatch(/^30\s+committed\s+-\s/);
    const json = jsonLines(await cairn(["ls", local, bucket, "--json"]))[0] as {
      steps: { step: number; tiers: string[] }[];
      tiers: { root: string }[];
    };
    expect(json.steps).toEqual([
      { step: 10, tiers: ["committed", "-"] },
      { step: 20, tiers: ["-", "committed"] },
      { step: 30, tiers: ["committed", "-"] },
    ]);
    expect(json.tiers).toHaveLength(2);
  });

  it("ls --json and inspect show each step's fingerprint: equal for identical tensors, null before content hashes", async () => {
    const root = join(await tempDir(), "run");
    const mgr = new CheckpointManager(root, 10, { checkpointOnPreemption: false });
    // 10 and 20 hold the same tensors (their step values differ); 30 changes one.
    for (const [step, seed] of [
      [10, 1],
      [20, 1],
      [30, 2],
    ] as const)
      await mgr.save(step, { model: { w: tensor(seed), b: tensor(7, [8]) }, step });
    await mgr.close();
    await cp(fileURLToPath(new URL("../../../tests/fixtures/incremental-2.1/1", import.meta.url)), join(root, "40"), {
      recursive: true,
    });
    const json = jsonLines(await cairn(["ls", root, "--json"]))[0] as {
      steps: { step: number; fingerprint: string | null }[];
    };
    const [ten, twenty, thirty, old] = json.steps.map((s) => s.fingerprint);
    expect(ten).toMatch(/^[0-9a-f]{32}$/);
    expect(twenty).toBe(ten);
    expect(thirty).toMatch(/^[0-9a-f]{32}$/);
    expect(thirty).not.toBe(ten);
    expect(old).toBeNull();
    const inspected = await cairn(["inspect", join(root, "20")]);
    expect(inspected.stdout).toContain(`fingerprint: ${ten}`);
    const inspectedJson = jsonLines(await cairn(["inspect", join(root, "30"), "--json"]))[0] as {
      fingerprint: string;
      entries: { chunks: { hash: string }[] }[];
    };
    expect(inspectedJson.fingerprint).toBe(thirty);
    expect(inspectedJson.entries[0]!.chunks[0]!.hash).toMatch(/^[0-9a-f]{32}$/);
    expect((await cairn(["inspect", join(root, "40")])).stdout).toContain("fingerprint: none");
  });

  it("ls of a location holding nothing fails with exit 1", async () => {
    const run = await cairn(["ls", join(await tempDir(), "nothing")]);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^cairn ls: nothing at file:\/\/.*nothing; check the URL or path\n$/);
  });

  it("inspect shows every entry with kind, dtype, shape, chunks and files; --json has the chunk boxes", async () => {
    const { dir, file } = await checkpoint();
    const run = await cairn(["inspect", dir]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/model\.w\s+tensor\s+float32\s+\[64,32\]\s+1\s+data-r0-\d-\w{12}\.safetensors/);
    expect(run.stdout).toMatch(/step\s+value\s+-\s+-\s+-\s+3/);
    const json = jsonLines(await cairn(["inspect", dir, "--json"]))[0] as {
      entries: Record<string, unknown>[];
      blockSize: number;
    };
    expect(json.blockSize).toBe(1024);
    expect(json.entries[0]).toMatchObject({
      key: ["model", "w"],
      kind: "tensor",
      dtype: "float32",
      shape: [64, 32],
      files: [file],
    });
    expect(json.entries[0]!.chunks).toEqual([
      expect.objectContaining({ offsets: [0, 0], sizes: [64, 32], file, byteLength: 64 * 32 * 4, blockSize: 1024 }),
    ]);
    expect(json.entries[2]).toMatchObject({ key: ["step"], kind: "value", value: 3 });
  });

  it("inspect of a root, an uncommitted or a missing checkpoint says what it is, exit 1", async () => {
    const root = await managerRoot();
    const ofRoot = await cairn(["inspect", root]);
    expect(ofRoot.code).toBe(1);
    expect(ofRoot.stderr).toMatch(
      /is not a checkpoint but a root of steps \(10, 20, 30\); give one step, like .*run\/30/,
    );
    const leftover = await cairn(["inspect", join(root, "40")]);
    expect(leftover.code).toBe(1);
    expect(leftover.stderr).toContain("holds files but no metadata.json");
    const missing = await cairn(["inspect", join(root, "50"), "--json"]);
    expect(missing.code).toBe(1);
    expect(jsonLines(missing)[0]).toMatchObject({
      error: { code: "not_found", message: expect.stringContaining("no checkpoint at") },
    });
  });
});

describe("cairn verify", () => {
  it("passes an intact checkpoint with exit 0", async () => {
    const { dir } = await checkpoint();
    const run = await cairn(["verify", dir]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^ok: .*: 3 entries, 1 data file, .* read, every checksum matches\n$/);
  });

  it("counts in words: one entry, one data file", async () => {
    const dir = join(await tempDir(), "one");
    await save({ w: tensor(1) }, dir);
    for (const command of ["verify", "inspect"]) {
      const run = await cairn([command, dir]);
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout, command).toContain("1 entry, 1 data file, ");
    }
  });

  it("finds a flipped byte: exit 3, the damaged key named on stdout and in one stderr line", async () => {
    const { dir, file, dataOffset } = await checkpoint();
    await flipByte(join(dir, file), dataOffset + 5000);
    const run = await cairn(["verify", dir]);
    expect(run.code).toBe(3);
    expect(run.stdout).toContain("DAMAGED");
    expect(run.stdout).toMatch(new RegExp(`checksum mismatch in ${file} for model\\.w \\(block 4,`));
    expect(run.stderr).toMatch(
      /^cairn verify: file:\/\/.* is damaged \(damaged entries: model\.w\); restore it from another copy or an earlier step\n$/,
    );
    const json = jsonLines(await cairn(["verify", dir, "--json"]));
    expect(json[0]).toMatchObject({ ok: false, damagedKeys: ["model.w"] });
    expect(json[1]).toMatchObject({ error: { code: "corrupt" } });
  });

  it("finds a damaged header, a truncated file and a missing file, naming every damaged key", async () => {
    const header = await checkpoint();
    await flipByte(join(header.dir, header.file), 8 + Math.floor(header.headerLength / 2));
    const h = await cairn(["verify", header.dir]);
    expect(h.code).toBe(3);
    expect(h.stdout).toContain("safetensors header does not match");
    expect(h.stderr).toContain("damaged entries: model.w");

    const cut = await checkpoint();
    await truncate(join(cut.dir, cut.file), cut.dataOffset + 100);
    const t = await cairn(["verify", cut.dir]);
    expect(t.code).toBe(3);
    expect(t.stdout).toContain("truncated");
    expect(t.stderr).toContain("model.w");

    const gone = await checkpoint();
    await rm(join(gone.dir, gone.file));
    const g = await cairn(["verify", gone.dir]);
    expect(g.code).toBe(3);
    expect(g.stdout).toContain(`${gone.file} is missing`);
    expect(g.stderr).toContain("damaged entries: model.w");
  });
});

describe("cairn cp", () => {
  it("copies a checkpoint, verified, committed, loading to the same values", async () => {
    const { dir } = await checkpoint();
    const copy = join(await tempDir(), "copy");
    const run = await cairn(["cp", dir, `file://${copy}`, "--then", "verify", copy]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^copied .* to file:\/\/.*copy: 1 data file, .*, read back and verified\n/);
    const a = (await load(dir)) as { model: { w: HostTensor } };
    const b = (await load(copy)) as { model: { w: HostTensor } };
    expect(b.model.w.data).toEqual(a.model.w.data);
    const [ma, mb] = [await readMetadata(dir), await readMetadata(copy)];
    expect(mb.createdAt).toBe(ma.createdAt);
    expect(Object.keys(mb.files)).not.toEqual(Object.keys(ma.files));
  });

  it("refuses a committed destination (exit 1) and a damaged source (exit 3), leaving nothing behind", async () => {
    const { dir, file, dataOffset } = await checkpoint();
    const other = (await checkpoint()).dir;
    const onto = await cairn(["cp", dir, other]);
    expect(onto.code).toBe(1);
    expect(onto.stderr).toMatch(/^cairn cp: a checkpoint is already committed at .*; choose a new location/);
    await flipByte(join(dir, file), dataOffset + 10);
    const copy = join(await tempDir(), "copy");
    const damaged = await cairn(["cp", dir, copy, "--no-read-back"]);
    expect(damaged.code).toBe(3);
    expect(damaged.stderr).toMatch(/is damaged, nothing was copied: checksum mismatch .* for model\.w/);
    expect(existsSync(copy) ? await readdir(copy) : []).toEqual([]);
  });
});

describe("cairn rm and gc", () => {
  it("rm deletes named steps, committed or leftover; an unknown step lists what is there; a bad step is a usage error", async () => {
    const root = await managerRoot();
    const run = await cairn(["rm", root, "10", "40", "--then", "ls", root, "--json"]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain("deleted steps 10, 40");
    expect(
      (jsonLines({ ...run, stdout: run.stdout.split("\n").slice(1).join("\n") })[0]!.steps as { step: number }[]).map(
        (s) => s.step,
      ),
    ).toEqual([20, 30]);
    const unknown = await cairn(["rm", root, "11"]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/no step 11 under .*; steps there: 20, 30/);
    const bad = await cairn(["rm", root, "1e3"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toBe('cairn rm: steps are non-negative decimal integers, got "1e3"; see cairn rm --help\n');
  });

  it("rm of a checkpoint deletes its metadata and data files; of a location without one it points to steps and gc", async () => {
    const { dir } = await checkpoint();
    await writeFile(join(dir, "notes.txt"), "mine");
    const run = await cairn(["rm", dir]);
    expect(run.code, run.stderr).toBe(0);
    expect(await readdir(dir)).toEqual(["notes.txt"]);
    const again = await cairn(["rm", dir]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(
      "to delete steps name them (cairn rm <root> <step>...); leftovers go with cairn gc <root>",
    );
  });

  it("gc keeps the newest N (or the best N by a metric) and removes only old leftovers", async () => {
    const root = await managerRoot();
    const young = await cairn(["gc", root, "--keep", "2", "--json"]);
    expect(young.code, young.stderr).toBe(0);
    expect(jsonLines(young)[0]).toMatchObject({ deletedSteps: [10], deletedLeftovers: [] });
    expect(existsSync(join(root, "40"))).toBe(true);
    const old = new Date(Date.now() - 2 * 3_600_000);
    await utimes(join(root, "40", "data-r0-0-aaaaaaaaaaaa.safetensors"), old, old);
    const best = await cairn([
      "gc",
      root,
      "--keep",
      "1",
      "--best",
      "loss",
      "--best-mode",
      "min",
      "--leftover-age",
      "1h",
    ]);
    expect(best.code, best.stderr).toBe(0);
    // Best by loss is 20 (0.1); the newest, 30, is always kept.
    expect(best.stdout).toBe("deleted leftover 40\n");
    const steps = (jsonLines(await cairn(["ls", root, "--json"]))[0]!.steps as { step: number }[]).map((s) => s.step);
    expect(steps).toEqual([20, 30]);
  });

  it("gc refuses bad options with exit 2", async () => {
    const root = await managerRoot();
    for (const [args, message] of [
      [["--keep", "two"], '--keep takes a positive integer, got "two"'],
      [["--leftover-age", "soon"], "--leftover-age takes a duration like 30m, 24h or 7d"],
      [["--best-mode", "min"], "--best-mode needs --best <metric>"],
    ] as const) {
      const run = await cairn(["gc", root, ...args]);
      expect(run.code).toBe(2);
      expect(run.stderr).toContain(message);
    }
  });
});

describe("help and usage errors", () => {
  it("every command has --help (exit 0); no command, an unknown one, a wrong argument count or option is exit 2", async () => {
    const runs = await Promise.all(COMMANDS.map((c) => cairn([c.name, "--help"])));
    runs.forEach((run, i) => {
      expect(run.code).toBe(0);
      expect(run.stdout).toMatch(new RegExp(`^usage: cairn ${COMMANDS[i]!.name} `));
      expect(run.stdout).toContain("--json");
    });
    const top = await cairn(["--help"]);
    expect(top.code).toBe(0);
    for (const c of COMMANDS) expect(top.stdout).toContain(`  ${c.name} `);
    expect((await cairn([])).code).toBe(2);
    const unknown = await cairn(["frobnicate"]);
    expect([unknown.code, unknown.stderr]).toEqual([
      2,
      expect.stringMatching(/^cairn: unknown command "frobnicate"; commands: ls, inspect/),
    ]);
    const count = await cairn(["export", "only-one"]);
    expect([count.code, count.stderr]).toEqual([
      2,
      "cairn export: expected <checkpoint> <file.safetensors | dir>, got 1 argument; see cairn export --help\n",
    ]);
    const option = await cairn(["verify", "x", "--fast"]);
    expect([option.code, option.stderr]).toEqual([
      2,
      "cairn verify: Unknown option '--fast'; see cairn verify --help\n",
    ]);
    const then = await cairn(["ls", "x", "--then"]);
    expect(then.code).toBe(2);
  });
});
