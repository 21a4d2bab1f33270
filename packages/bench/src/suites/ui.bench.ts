// `cairn ui` on a large root: the page's step listing (GET api/steps over HTTP, from a server
// started fresh, so every metadata.json is read, and again from the same server, which reads only
// what changed) against `cairn ls --json` of the same root in the same process, in turns.
import { join } from "node:path";
import { type StateDict, hostTensor } from "@cairn/core";
import { RunView, openLocation, runCli, startUiServer } from "@cairn/cli";
import { CheckpointManager } from "@cairn/manager";
import { report } from "../report.js";
import { median, quick, range, rounds, timed, withTempDir } from "../support.js";

const suite = "ui";
const STEPS = quick ? 200 : 2000;
const ROUNDS = rounds(5);

function state(step: number): StateDict {
  return {
    // Weights of their own per step: the same weights twice is a stale save the manager warns of.
    model: { w: hostTensor("float32", [256, 16]), b: hostTensor("float32", [16], new Float32Array(16).fill(step)) },
    optim: { m: hostTensor("float32", [256, 16]), v: hostTensor("float32", [256, 16]), step },
  };
}

/** `cairn ls --json <root>` in this process, its output discarded. */
async function ls(root: string): Promise<void> {
  const code = await runCli(["ls", root, "--json"], { stdout: { write: () => true }, stderr: { write: () => true } });
  if (code !== 0) throw new Error(`cairn ls exited ${code}`);
}

/** The page's listing: GET api/steps, parsed as the page parses it. */
async function listing(url: string): Promise<void> {
  const response = await fetch(`${url}api/steps`);
  const body = (await response.json()) as { steps: unknown[] };
  if (body.steps.length !== STEPS) throw new Error(`api/steps listed ${body.steps.length} of ${STEPS} steps`);
}

await withTempDir(async (dir) => {
  // Every step saved by Cairn: a copied step directory is refused as not that step's (its metadata names step 0).
  const root = join(dir, "root");
  const writer = new CheckpointManager(`file://${root}`, 1, { checkpointOnPreemption: false });
  for (let step = 0; step < STEPS; step++)
    await writer.save(step, state(step), { metrics: { loss: 0.5, accuracy: 0.9 } });
  await writer.close();
  await ls(root); // untimed: the page cache holds the root for every side alike

  const location = await openLocation(root);
  const warm = await startUiServer(new RunView([location], { refreshMs: 2000 }));
  await listing(warm.url);
  const times = { ls: [] as number[], cold: [] as number[], warm: [] as number[] };
  for (let round = 0; round < ROUNDS; round++) {
    const order = (["ls", "cold", "warm"] as const).map((_, i, all) => all[(i + round) % all.length]!);
    for (const side of order) {
      if (side === "ls") times.ls.push(await timed(() => ls(root)));
      if (side === "warm") times.warm.push(await timed(() => listing(warm.url)));
      if (side === "cold") {
        const server = await startUiServer(new RunView([location], { refreshMs: 2000 }));
        times.cold.push(await timed(() => listing(server.url)));
        await server.close();
      }
    }
  }
  await warm.close();
  await location.close();
  const baseline = { name: "cairn ls --json, same process, in turns", value: median(times.ls) };
  for (const [side, label] of [
    ["cold", "first listing of a fresh server (every metadata.json read)"],
    ["warm", "listing again (only changed metadata.json read)"],
  ] as const) {
    const value = median(times[side]);
    report({
      suite,
      name: `GET api/steps, root of ${STEPS} steps, ${label}`,
      value,
      unit: "s",
      baseline,
      ratio: value / baseline.value,
      better: "lower",
      target: 2,
      extra: { rounds: ROUNDS, range: range(times[side]), lsRange: range(times.ls) },
    });
  }
});
