// Saves a small state dict to a local directory and loads it back in place, verified.
//   pnpm demo [checkpoint-dir]      (default: ./checkpoints/example)
import { rm } from "node:fs/promises";
import { resolve } from "node:path";
import { hostTensor, load, readMetadata, save } from "@cairn/core";
import "@cairn/storage-local";

const dir = resolve(process.argv[2] ?? "checkpoints/example");
await rm(dir, { recursive: true, force: true });

const weights = hostTensor("float32", [256, 256]);
weights.data.forEach((_, i) => (weights.data[i] = Math.sin(i)));
const state = {
  model: { weights, bias: hostTensor("float32", [256]) },
  step: 1000,
  rng: crypto.getRandomValues(new Uint8Array(16)),
};

const saved = await save(state, { checkpointId: dir, metadata: { step: 1000 } });
console.log(
  `saved ${saved.entries} entries, ${saved.bytes} bytes in ${saved.files} files to ${saved.checkpoint} (${saved.seconds.toFixed(3)} s)`,
);

const target = {
  model: { weights: hostTensor("float32", [256, 256]), bias: hostTensor("float32", [256]) },
  step: 0,
  rng: new Uint8Array(0),
};
const loaded = await load(target, dir);
console.log(`loaded ${loaded.entries} entries, read ${loaded.bytesRead} bytes, checksums verified`);
console.log(
  `step ${target.step}, weights equal: ${Buffer.from(target.model.weights.data.buffer).equals(Buffer.from(weights.data.buffer))}`,
);
console.log(`metadata: ${JSON.stringify((await readMetadata(dir)).user)}`);
