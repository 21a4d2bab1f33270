// One rank of the distributed benchmark (started by cairn-run). Each rank holds its row shards
// of four 256 MiB float32 tensors (1 GiB in all).
// usage: distributed-bench-rank.ts save <url> | load <url> <rows|cols>
import { type Layout, type StateDict, hostTensor, layoutBoxes, load, readMetadata, save, shardedTensor } from "@cairn/core";
import { type Box, intersectBoxes, itemSize, numel } from "@cairn/core/format";
import { initProcessGroup } from "@cairn/distributed";
import "../src/index.js";

const SHAPE = [16384, 4096];
const TENSORS = 4;
const [mode, url, layout = "rows"] = process.argv.slice(2);
const group = await initProcessGroup({ timeoutMs: 600_000 });
const { rank, worldSize } = group;

function state(boxesOf: (shape: number[]) => Box[], fill: boolean): StateDict {
  const out: StateDict = {};
  for (let t = 0; t < TENSORS; t++) {
    const shards = boxesOf(SHAPE).map((box) => {
      const tensor = hostTensor("float32", box.sizes);
      if (fill) for (let i = 0; i < tensor.data.length; i += 1024) tensor.data[i] = i + t;
      return { offsets: box.offsets, tensor };
    });
    out[`layer${t}`] = shardedTensor("float32", SHAPE, shards);
  }
  return out;
}

const boxesOf = (shape: number[]): Box[] => layoutBoxes(layout as Layout, rank, worldSize, shape);
const target = state(boxesOf, mode === "save");
await group.barrier();
const started = performance.now();
let bytesRead = 0;
if (mode === "save") {
  await save(target, { checkpointId: url!, processGroup: group });
} else {
  bytesRead = (await load(target, { checkpointId: url!, processGroup: group })).bytesRead;
}
await group.barrier();
const seconds = (performance.now() - started) / 1000;
let needed = 0;
let overhead = 0;
if (mode === "load") {
  const metadata = await readMetadata(url!);
  const files = new Set<string>();
  for (const entry of metadata.entries) {
    if (entry.kind !== "tensor") continue;
    for (const box of boxesOf([...entry.shape])) {
      needed += numel(box.sizes) * itemSize(entry.dtype);
      for (const chunk of entry.chunks) if (intersectBoxes(chunk, box)) files.add(chunk.file);
    }
  }
  overhead = [...files].reduce((n, f) => n + 8 + metadata.files[f]!.headerLength, 0);
}
const all = await group.allGather({ bytesRead, needed, overhead });
if (rank === 0) {
  const sum = (k: "bytesRead" | "needed" | "overhead"): number => all.reduce((n, r) => n + r[k], 0);
  process.stdout.write(`RESULT ${JSON.stringify({ mode, layout, worldSize, seconds, bytes: TENSORS * numel(SHAPE) * 4, bytesRead: sum("bytesRead"), needed: sum("needed"), overhead: sum("overhead") })}\n`);
}
await group.close();
