// One rank of the ranks suite, started by launchRanks: holds its row shards of four float32
// tensors of [rows, 4096], saves them (or loads them back) between two barriers; rank 0 prints
// `RESULT {"seconds": …}`, every rank `CPU {"seconds": …}` (its process's CPU time in between).
// usage: rank.ts save|load <file:// url> <rows>
import { type StateDict, hostTensor, layoutBoxes, load, save, shardedTensor } from "@cairn/core";
import { initProcessGroup } from "@cairn/distributed";
import "@cairn/storage-local";

const TENSORS = 4;
const [mode, url, rows] = process.argv.slice(2);
if ((mode !== "save" && mode !== "load") || !url || !Number.isSafeInteger(Number(rows)))
  throw new Error("usage: rank.ts save|load <url> <rows>");
const shape = [Number(rows), 4096];
const group = await initProcessGroup({ timeoutMs: 600_000 });

// Every page of every shard touched (a load fills memory it owns already, as in training).
const state: StateDict = {};
for (let t = 0; t < TENSORS; t++) {
  const shards = layoutBoxes("rows", group.rank, group.worldSize, shape).map((box) => {
    const tensor = hostTensor("float32", box.sizes);
    tensor.data.fill(-1);
    if (mode === "save") for (let i = 0; i < tensor.data.length; i += 1024) tensor.data[i] = i + t;
    return { offsets: box.offsets, tensor };
  });
  state[`layer${t}`] = shardedTensor("float32", shape, shards);
}

await group.barrier();
const started = performance.now();
const used = process.cpuUsage();
if (mode === "save") await save(state, { checkpointId: url, processGroup: group });
else await load(state, { checkpointId: url, processGroup: group });
await group.barrier();
const seconds = (performance.now() - started) / 1000;
const cpu = process.cpuUsage(used);
process.stdout.write(`CPU ${JSON.stringify({ seconds: (cpu.user + cpu.system) / 1e6 })}\n`);
if (group.rank === 0) process.stdout.write(`RESULT ${JSON.stringify({ seconds })}\n`);
await group.close();
