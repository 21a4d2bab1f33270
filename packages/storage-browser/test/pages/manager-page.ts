// The manager in a page, on opfs:// (or idb://): saves, restores, a save cut by a closed tab, a
// flipped byte. Checksums are CRC32Cs over the state's bytes, compared by the Node-side test.
import { exposeToTests } from "@cairn/browser-testing/page";
import { type HostTensor, type StateDict, hostTensor } from "@cairn/core";
import { crc32c } from "@cairn/core/format";
import { CheckpointManager } from "@cairn/manager";
import "../../src/index.js";

/** A state whose every byte depends on `step` (zeros for step 0: a restore target). */
function state(step: number, rows = 64): { weights: HostTensor<"float32">; bias: HostTensor<"float32">; step: number } {
  const weights = new Float32Array(rows * 256);
  const bias = new Float32Array(256);
  if (step > 0) {
    for (let i = 0; i < weights.length; i++) weights[i] = Math.sin(i * 0.001 + step);
    for (let i = 0; i < bias.length; i++) bias[i] = step + i / 256;
  }
  return { weights: hostTensor("float32", [rows, 256], weights), bias: hostTensor("float32", [256], bias), step };
}

function checksum(dict: ReturnType<typeof state>): string {
  const w = new Uint8Array(dict.weights.data.buffer, dict.weights.data.byteOffset, dict.weights.data.byteLength);
  const b = new Uint8Array(dict.bias.data.buffer, dict.bias.data.byteOffset, dict.bias.data.byteLength);
  return `${crc32c(b, crc32c(w)).toString(16)}:${dict.step}`;
}

/** Trains nothing: saves steps 1…`steps` every `interval` with saveAsync, keeping `keep`. */
async function saveSteps(
  root: string,
  steps: number,
  interval: number,
  keep: number,
): Promise<{ steps: number[]; checksum: string }> {
  const manager = new CheckpointManager(root, interval, { maxToKeep: keep });
  let last = state(0);
  for (let step = 1; step <= steps; step++) {
    last = state(step);
    await manager.saveAsync(step, last as unknown as StateDict);
  }
  await manager.close();
  return {
    steps: await new CheckpointManager(root, interval, { readOnly: true }).allSteps(),
    checksum: checksum(last),
  };
}

async function restoreLatest(root: string): Promise<{ step: number | undefined; checksum?: string }> {
  const manager = new CheckpointManager(root, 1, { readOnly: true });
  const step = await manager.latestStep();
  if (step === undefined) return { step };
  const target = state(0);
  await manager.restore(step, target as unknown as StateDict);
  await manager.close();
  return { step, checksum: checksum(target) };
}

async function steps(root: string): Promise<number[]> {
  return new CheckpointManager(root, 1, { readOnly: true }).allSteps();
}

/** Starts a save of a large state (about 128 MiB) and does not wait: the test closes the tab meanwhile. */
function startLargeSave(root: string, step: number): void {
  const manager = new CheckpointManager(root, 1);
  void manager.save(step, state(step, 1 << 17) as unknown as StateDict);
}

/** The OPFS directory of `opfs://name/…` as handles, walked by path. */
async function opfsDirectory(path: string[]): Promise<FileSystemDirectoryHandle> {
  let dir = await navigator.storage.getDirectory();
  for (const name of path) dir = await dir.getDirectoryHandle(name);
  return dir;
}

/** Names of the files (temp files included) under opfs://`name`/`step`/. */
async function rawFiles(name: string, step: number): Promise<string[]> {
  const dir = await opfsDirectory([name, String(step)]);
  const names: string[] = [];
  for await (const [entry] of (dir as unknown as { entries(): AsyncIterable<[string, unknown]> }).entries())
    names.push(entry);
  return names.sort();
}

/** Flips one bit in the middle of step `step`'s first data file, in place. */
async function flipByte(name: string, step: number): Promise<string> {
  const dir = await opfsDirectory([name, String(step)]);
  const file = (await rawFiles(name, step)).find((n) => n.endsWith(".safetensors"))!;
  const handle = await dir.getFileHandle(file);
  const bytes = new Uint8Array(await (await handle.getFile()).arrayBuffer());
  const at = bytes.length - 1000;
  bytes[at]! ^= 0x10;
  const writable = await handle.createWritable();
  await writable.write(bytes);
  await writable.close();
  return file;
}

async function restoreError(root: string, step: number): Promise<string> {
  const manager = new CheckpointManager(root, 1, { readOnly: true });
  try {
    await manager.restore(step, state(0) as unknown as StateDict);
    return "restored";
  } catch (error) {
    return `${(error as { code?: string }).code}: ${(error as Error).message}`;
  }
}

exposeToTests({ saveSteps, restoreLatest, steps, startLargeSave, rawFiles, flipByte, restoreError });
