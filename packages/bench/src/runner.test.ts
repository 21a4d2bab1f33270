import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { END, START, renderSection, replaceSection } from "./docs-section.js";
import type { BenchResult } from "./report.js";
import { type BenchRun, findSuites, runSuites } from "./runner.js";
import { ratioTable } from "./table.js";

const reportModule = pathToFileURL(join(import.meta.dirname, "report.ts")).href;
let dir: string;

// A suite that reports two figures (one meeting its target, one missing it) and one without a baseline.
const fakeSuite = `
import { report } from ${JSON.stringify(reportModule)};
const quick = process.env.CAIRN_BENCH_QUICK === "1";
report({ suite: "fake", name: quick ? "save, quick" : "save", value: 2, unit: "s", baseline: { name: "cp", value: 4 }, ratio: 0.5, better: "lower", target: 1 });
report({ suite: "fake", name: "load", value: 100, unit: "MiB/s", baseline: { name: "cat", value: 200 }, ratio: 0.5, better: "higher", target: 0.8, extra: { secondsRange: [1, 2], rounds: 3 } });
report({ suite: "fake", name: "peak RSS over state", value: 64, unit: "MiB" });
`;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "cairn-bench-test-"));
  await writeFile(join(dir, "fake.bench.ts"), fakeSuite);
  await writeFile(join(dir, "broken.bench.ts"), `throw new Error("broken on purpose");\n`);
  await writeFile(join(dir, "helper.ts"), "export const notASuite = 1;\n");
});
afterAll(() => rm(dir, { recursive: true, force: true }));

describe("runSuites", () => {
  it("finds suites by name and refuses unknown ones", async () => {
    expect(await findSuites(dir)).toEqual(["broken", "fake"]);
    expect(await findSuites(dir, ["fake.bench.ts"])).toEqual(["fake"]);
    await expect(findSuites(dir, ["nope"])).rejects.toThrow(/no suite nope/);
  });

  it("runs each suite in its own process with CAIRN_BENCH_OUT and collects what it reports", async () => {
    const run = await runSuites({ suitesDir: dir, quick: true, diskBytes: 0 });
    expect(run.quick).toBe(true);
    expect(run.machine.cores).toBeGreaterThan(0);
    expect(run.machine.disk).toBeUndefined();
    expect(run.suites.map((s) => [s.suite, s.ok])).toEqual([
      ["broken", false],
      ["fake", true],
    ]);
    expect(run.suites[0]!.error).toBe("exit code 1");
    expect(run.results.map((r) => r.name)).toEqual(["save, quick", "load", "peak RSS over state"]);
  });

  it("keeps the previous run's suites that were not run again", async () => {
    const old: BenchResult = { suite: "gone", name: "old figure", value: 1, unit: "s" };
    const first = await runSuites({ suitesDir: dir, names: ["fake"], quick: false, diskBytes: 0 });
    const previous: BenchRun = {
      ...first,
      suites: [...first.suites, { suite: "gone", date: "2026-01-01T00:00:00.000Z", seconds: 1, ok: true }],
      results: [old],
    };
    const run = await runSuites({ suitesDir: dir, names: ["fake"], quick: false, diskBytes: 0, previous });
    expect(run.results.map((r) => r.name)).toEqual(["save", "load", "peak RSS over state", "old figure"]);
    expect(run.suites.map((s) => s.suite)).toEqual(["fake", "gone"]);
  });
});

describe("tables and docs", () => {
  const results: BenchResult[] = [
    {
      suite: "fake",
      name: "save",
      value: 2,
      unit: "s",
      baseline: { name: "cp", value: 4 },
      ratio: 0.5,
      better: "lower",
      target: 1,
    },
    {
      suite: "fake",
      name: "load",
      value: 100,
      unit: "MiB/s",
      baseline: { name: "cat", value: 200 },
      ratio: 0.5,
      better: "higher",
      target: 0.8,
      extra: { secondsRange: [1.5, 2.25] },
    },
    { suite: "other", name: "peak RSS", value: 64, unit: "MiB" },
  ];
  const run: BenchRun = {
    date: "2026-11-25T12:00:00.000Z",
    quick: false,
    machine: {
      cpu: "Test CPU",
      cores: 2,
      ramGiB: 23.4,
      loadAverage: 3.5,
      kernel: "6.1",
      node: "v20.20.2",
      disk: { bytes: 2 ** 30, directWriteFsync: 1800, coldRead: 1300, warmRead: 6700 },
    },
    suites: [{ suite: "fake", date: "2026-11-25T12:00:00.000Z", seconds: 3, ok: true }],
    results,
  };

  it("prints one row per figure with its ratio, target and verdict", () => {
    const lines = ratioTable(results).split("\n");
    expect(lines[0]).toMatch(/^\| suite +\| what +\| Cairn +\| baseline +\| ratio +\| target +\| met +\|$/);
    expect(lines[2]).toMatch(/\| save +\| 2 s +\| cp: 4 s +\| 0\.50× +\| ≤ 1 +\| met +\|/);
    expect(lines[3]).toMatch(/\| 0\.50× +\| ≥ 0\.8 +\| \*\*not met\*\* +\|/);
    expect(lines[4]).toMatch(/\| peak RSS +\| 64 MiB +\| — +\| — +\| — +\| — +\|/);
  });

  it("replaces only the generated section of the docs", () => {
    const section = renderSection(run);
    expect(section).toContain("Machine: Test CPU, 2 cores, 23.4 GiB RAM");
    expect(section).toContain("direct write + fsync 1800 MiB/s, cold read 1300 MiB/s, warm read 6700 MiB/s");
    expect(section).toContain("### `other`");
    expect(section).toContain("Load average when the run started: 3.5");
    expect(section).toContain("seconds 1.50–2.25");
    const first = replaceSection("# Benchmarks\n\nHand-written intro.\n", section);
    expect(first).toBe(`# Benchmarks\n\nHand-written intro.\n\n${section}\n`);
    const edited = `${first}\n## Why blocked\n\nHand-written, kept.\n`;
    const second = replaceSection(edited, renderSection({ ...run, results: [results[2]!] }));
    expect(second.startsWith("# Benchmarks\n\nHand-written intro.\n\n")).toBe(true);
    expect(second.endsWith("## Why blocked\n\nHand-written, kept.\n")).toBe(true);
    expect(second).not.toContain("| save ");
    expect(second.split(START).length).toBe(2);
    expect(second.split(END).length).toBe(2);
  });
});
