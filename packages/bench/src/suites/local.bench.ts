// file:// against what a user would pick instead, same bytes, same disk, same run:
// (a) save a mixed state (big + 2,000 small tensors) vs node:fs write+fsync, a dd-style direct
//     write of Cairn's files (the disk's limit), torch.save, DCP, safetensors; Cairn and node:fs
//     again after an untimed first save in the same process (steady state); (b) its warm load vs
//     node:fs read, safetensors load_file + copy (in Node on Cairn's own files, and in Python
//     when importable), torch.load + copy, DCP;
// (c) 16 x 256 MiB: save vs a dd-style direct write + fsync, cold load vs a cold dd read.
// Every phase runs in its own process; phase order flips every round; medians with ranges.
// Fairness of (a)'s saves: each round starts with an untimed Cairn save whose files give the
// baselines their layout, so the timed saves (Cairn's among them) run in any order; every write
// phase (Node or Python) runs `sync` just before its clock starts, so none pays for the writeback
// or deletions of the phase or round before it. In (c) the dd-style write uses the timed save's files.
import { execFileSync } from "node:child_process";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { type PhaseRun, PhaseRuns, nodePhaseRun, pythonPhaseRun, reportRates } from "../local/phases.js";
import { type StateSpec, describeState, stateSpec } from "../local/state-spec.js";
import { dropCaches, pythonWith, quick, rounds, warmCache, withTempDir } from "../support.js";

const suite = "local";
const mixed = quick ? stateSpec(2, 8, 100, 16) : stateSpec(2, 128, 2000, 256);
const big = quick ? stateSpec(4, 8) : stateSpec(16, 256);
const n = rounds(3);
/** (a)'s rounds: more than the others, since a fresh save's wall time spreads with the disk's. */
const mixedRounds = rounds(5);

const torchPython = pythonWith("torch");
/** Whether `python` has `module` installed, without importing it (importing torch twice costs seconds). */
const installed = (python: string, module: string): boolean => {
  try {
    execFileSync(
      python,
      ["-c", `import importlib.util, sys; sys.exit(importlib.util.find_spec("${module}") is None)`],
      { stdio: "ignore" },
    );
    return true;
  } catch {
    return false;
  }
};
const safetensorsPython = torchPython && installed(torchPython, "safetensors") ? torchPython : undefined;
if (!torchPython) console.log("torch does not import in /usr/bin/python3 or python3: no torch.save or DCP rows");
if (!safetensorsPython) console.log("safetensors is not installed beside torch: no Python safetensors rows");

/** A phase step: name, and how to run it in `dir`. */
type Step = [phase: string, run: (dir: string) => Promise<PhaseRun>];

function mixedSaves(spec: StateSpec): Step[] {
  const steps: Step[] = [
    ["cairn-save", (dir) => nodePhaseRun("cairn-save", spec, join(dir, "cairn"))],
    ["fs-write", (dir) => nodePhaseRun("fs-write", spec, join(dir, "layout"), join(dir, "fs"))],
    ["direct-write", (dir) => nodePhaseRun("direct-write", spec, join(dir, "layout"), join(dir, "dd"))],
    ["cairn-save-steady", (dir) => nodePhaseRun("cairn-save-steady", spec, join(dir, "steady"))],
    ["fs-write-steady", (dir) => nodePhaseRun("fs-write-steady", spec, join(dir, "layout"), join(dir, "fs-steady"))],
  ];
  if (torchPython) {
    steps.push(["torch-save", (dir) => pythonPhaseRun(torchPython, "torch-save", spec, join(dir, "torch.pt"))]);
    steps.push(["dcp-save", (dir) => pythonPhaseRun(torchPython, "dcp-save", spec, join(dir, "dcp"))]);
  }
  if (safetensorsPython)
    steps.push([
      "safetensors-save",
      (dir) => pythonPhaseRun(safetensorsPython, "safetensors-save", spec, join(dir, "st.safetensors")),
    ]);
  return steps;
}

function mixedLoads(spec: StateSpec): Step[] {
  const steps: Step[] = [
    ["cairn-load", (dir) => nodePhaseRun("cairn-load", spec, join(dir, "cairn"))],
    ["fs-read", (dir) => nodePhaseRun("fs-read", spec, join(dir, "layout"), join(dir, "fs"))],
    ["safetensors-node-load", (dir) => nodePhaseRun("safetensors-load", spec, join(dir, "cairn"))],
  ];
  if (torchPython) {
    steps.push(["torch-load", (dir) => pythonPhaseRun(torchPython, "torch-load", spec, join(dir, "torch.pt"))]);
    steps.push(["dcp-load", (dir) => pythonPhaseRun(torchPython, "dcp-load", spec, join(dir, "dcp"))]);
  }
  if (safetensorsPython)
    steps.push([
      "safetensors-load",
      (dir) => pythonPhaseRun(safetensorsPython, "safetensors-load", spec, join(dir, "st.safetensors")),
    ]);
  return steps;
}

/** Steps in order on even rounds and reversed on odd ones, except that `first` always runs first (the others use its files). */
function ordered(steps: Step[], round: number, first?: string): Step[] {
  const head = steps.filter(([p]) => p === first);
  const rest = steps.filter(([p]) => p !== first);
  return [...head, ...(round % 2 === 0 ? rest : rest.reverse())];
}

const runs = new PhaseRuns();
console.log(`(a, b) ${describeState(mixed)}, ${mixedRounds} round(s)`);
for (let round = 0; round < mixedRounds; round++) {
  await withTempDir(async (dir) => {
    // Untimed: the layout the baselines write and read (each save of the state names its files anew).
    await nodePhaseRun("cairn-save", mixed, join(dir, "layout"));
    for (const [phase, run] of ordered(mixedSaves(mixed), round)) runs.add(phase, await run(dir));
    if (round >= n) return;
    // Only what the loads read stays: each load phase warms every file of the round first.
    for (const extra of ["dd", "steady", "steady-first", "fs-steady", "fs-steady-first"])
      await rm(join(dir, extra), { recursive: true, force: true });
    for (const [phase, run] of ordered(mixedLoads(mixed), round)) {
      await warmCache(dir);
      runs.add(phase, await run(dir));
    }
  });
}

const cold = await dropCaches();
if (!cold) console.log("this process may not drop the page cache (not root, or not Linux): no cold-load rows");
console.log(`(c) ${describeState(big)}, ${n} round(s)`);
for (let round = 0; round < n; round++) {
  await withTempDir(async (dir) => {
    const saves: Step[] = [
      ["big-cairn-save", (d) => nodePhaseRun("cairn-save", big, join(d, "cairn"))],
      ["big-direct-write", (d) => nodePhaseRun("direct-write", big, join(d, "cairn"), join(d, "dd"))],
    ];
    for (const [phase, run] of ordered(saves, round, "big-cairn-save")) runs.add(phase, await run(dir));
    if (!cold) return;
    const loads: Step[] = [
      ["big-cairn-load-cold", (d) => nodePhaseRun("cairn-load", big, join(d, "cairn"))],
      ["big-dd-read-cold", (d) => nodePhaseRun("dd-read", big, join(d, "cairn"))],
    ];
    for (const [phase, run] of ordered(loads, round)) {
      await dropCaches();
      runs.add(phase, await run(dir));
    }
  });
}

const what = describeState(mixed);
const compare = (name: string, cairn: string, baseline: string, baselineName: string, target?: number): void => {
  if (runs.has(cairn) && runs.has(baseline))
    reportRates(runs, { suite, name, cairn, baseline, baselineName, ...(target === undefined ? {} : { target }) });
};
compare(`save ${what}`, "cairn-save", "fs-write", "node:fs write + fsync, Cairn's layout");
compare(`save ${what}`, "cairn-save", "direct-write", "dd-style direct write + fsync of Cairn's files");
compare(
  `save ${what}, steady (a second save in the process)`,
  "cairn-save-steady",
  "fs-write-steady",
  "node:fs write + fsync, Cairn's layout, steady",
);
compare(`save ${what}`, "cairn-save", "torch-save", "torch.save + fsync");
compare(`save ${what}`, "cairn-save", "dcp-save", "DCP save_state_dict (FileSystemWriter)");
compare(`save ${what}`, "cairn-save", "safetensors-save", "safetensors save_file + fsync");
compare(`warm load ${what}`, "cairn-load", "fs-read", "node:fs read into place");
compare(
  `warm load ${what}`,
  "cairn-load",
  "safetensors-node-load",
  "safetensors-style read whole file + copy (Node)",
  0.8,
);
compare(`warm load ${what}`, "cairn-load", "safetensors-load", "safetensors load_file + copy (Python)", 0.8);
compare(`warm load ${what}`, "cairn-load", "torch-load", "torch.load + copy");
compare(`warm load ${what}`, "cairn-load", "dcp-load", "DCP load_state_dict (FileSystemReader)");
compare(`save ${describeState(big)}`, "big-cairn-save", "big-direct-write", "dd-style direct write + fsync");
compare(`cold load ${describeState(big)}`, "big-cairn-load-cold", "big-dd-read-cold", "cold dd read, bs=16M", 0.9);
