import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type DType, type KeyPath, type StorageAdapter, displayKey, openStorage } from "@cairn/core";
import { type Box, blockChecksums, crc32c, itemSize, layoutSafetensors } from "@cairn/core/format";
import "@cairn/storage-local";
import { afterAll } from "vitest";
import { runCli } from "../src/main.js";

export const BIN = fileURLToPath(new URL("../bin/cairn.js", import.meta.url));

export interface CliRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs `cairn …` in this process through `runCli`, the function the bin calls, with stdout and
 * stderr captured as a pipe would (not a terminal). What only a process shows (its exit status,
 * memory:// vanishing with it, output other code writes to stderr, the environment) is tested
 * through `cairnProcess`.
 */
export async function cairn(args: readonly string[]): Promise<CliRun> {
  let stdout = "";
  let stderr = "";
  const code = await runCli(args, {
    stdout: { write: (text: string) => (stdout += text) },
    stderr: { write: (text: string) => (stderr += text) },
  });
  return { code, stdout, stderr };
}

/** Runs the real bin, `node bin/cairn.js …`, as a user's shell would, with stdout a pipe (not a terminal). */
export function cairnProcess(
  args: readonly string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<CliRun> {
  const child = spawn(process.execPath, [BIN, ...args], { stdio: ["ignore", "pipe", "pipe"], ...options });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code) => resolve({ code, stdout, stderr }));
  });
}

/** The JSON lines a `--json` run printed. */
export function jsonLines(run: CliRun): Record<string, unknown>[] {
  return run.stdout
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

const dirs: string[] = [];
afterAll(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

export async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "cairn-cli-"));
  dirs.push(dir);
  return dir;
}

/** Deterministic bytes, different for every seed. */
export function pattern(length: number, seed = 1): Uint8Array {
  const out = new Uint8Array(length);
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < length; i++) {
    x = (x ^ (x << 13)) >>> 0;
    x = (x ^ (x >>> 17)) >>> 0;
    x = (x ^ (x << 5)) >>> 0;
    out[i] = x & 0xff;
  }
  return out;
}

/** The bytes of `box` of a row-major tensor, element by element (deliberately naive: the reference). */
export function sliceBox(global: Uint8Array, shape: readonly number[], size: number, box: Box): Uint8Array {
  const count = box.sizes.reduce((a, b) => a * b, 1);
  const out = new Uint8Array(count * size);
  for (let i = 0; i < count; i++) {
    let rest = i;
    let flat = 0;
    let stride = 1;
    const index: number[] = [];
    for (let d = box.sizes.length - 1; d >= 0; d--) {
      index[d] = (rest % box.sizes[d]!) + box.offsets[d]!;
      rest = Math.floor(rest / box.sizes[d]!);
    }
    for (let d = shape.length - 1; d >= 0; d--) {
      flat += index[d]! * stride;
      stride *= shape[d]!;
    }
    out.set(global.subarray(flat * size, flat * size + size), i * size);
  }
  return out;
}

export interface ShardedTensorSpec {
  readonly key: KeyPath;
  readonly dtype: DType;
  readonly shape: readonly number[];
  /** The whole tensor, row-major. */
  readonly global: Uint8Array;
  /** The chunks it is saved as, in any layout. */
  readonly boxes: readonly Box[];
}

/**
 * Writes a checkpoint whose tensors are saved as the given chunk boxes, by hand: data files
 * laid out with core's safetensors layout, chunks spread over `files` files, block checksums
 * and metadata.json written here following docs/format.md. Core's `save` cannot shard yet.
 */
export async function writeShardedCheckpoint(
  storage: StorageAdapter,
  tensors: readonly ShardedTensorSpec[],
  options: { blockSize: number; files: number; user?: Record<string, unknown> },
): Promise<void> {
  const perFile: { tensor: ShardedTensorSpec; box: Box; bytes: Uint8Array; name: string }[][] = Array.from(
    { length: options.files },
    () => [],
  );
  let n = 0;
  for (const tensor of tensors) {
    for (const box of tensor.boxes) {
      const bytes = sliceBox(tensor.global, tensor.shape, itemSize(tensor.dtype), box);
      perFile[n++ % options.files]!.push({
        tensor,
        box,
        bytes,
        name: `${displayKey(tensor.key)}@${box.offsets.join(",")}`,
      });
    }
  }
  const files: Record<string, unknown> = {};
  const chunks = new Map<ShardedTensorSpec, unknown[]>();
  for (const [f, items] of perFile.entries()) {
    if (items.length === 0) continue;
    const file = `data-r${f}-0-0123456789ab.safetensors`;
    const layout = layoutSafetensors(
      items.map((i) => ({ name: i.name, dtype: i.tensor.dtype, shape: i.box.sizes, byteLength: i.bytes.byteLength })),
      { format: "cairn-checkpoint/1" },
    );
    const body = new Uint8Array(layout.fileSize);
    body.set(layout.header);
    items.forEach((item, i) => {
      body.set(item.bytes, layout.offsets[i]!);
      const list = chunks.get(item.tensor) ?? [];
      list.push({
        offsets: item.box.offsets,
        sizes: item.box.sizes,
        file,
        tensorName: item.name,
        byteOffset: layout.offsets[i]!,
        byteLength: item.bytes.byteLength,
        crc32c: blockChecksums(item.bytes, options.blockSize),
      });
      chunks.set(item.tensor, list);
    });
    await storage.write(file, body);
    files[file] = {
      rank: f,
      size: layout.fileSize,
      headerLength: layout.header.byteLength - 8,
      headerCrc32c: crc32c(layout.header),
    };
  }
  const metadata = {
    format: "cairn-checkpoint",
    version: "1.0",
    worldSize: options.files,
    createdAt: "2026-01-02T03:04:05.000Z",
    checksum: { algorithm: "crc32c", blockSize: options.blockSize },
    files,
    entries: tensors.map((t) => ({
      kind: "tensor",
      key: t.key,
      dtype: t.dtype,
      shape: t.shape,
      chunks: chunks.get(t) ?? [],
    })),
    user: options.user ?? {},
  };
  await storage.write("metadata.json", new TextEncoder().encode(JSON.stringify(metadata)));
}

/** Opens a location, runs `use`, closes it. */
export async function withStorage<T>(url: string, use: (storage: StorageAdapter) => Promise<T>): Promise<T> {
  const storage = await openStorage(url);
  try {
    return await use(storage);
  } finally {
    await storage.close();
  }
}

/** Grid boxes of a shape: `splits[d]` pieces along dimension d (uneven when it does not divide). */
export function gridBoxes(shape: readonly number[], splits: readonly number[]): Box[] {
  const ranges = shape.map((size, d) => {
    const k = splits[d] ?? 1;
    const cuts = Array.from({ length: k + 1 }, (_, i) => Math.round((i * size) / k));
    return cuts
      .slice(0, -1)
      .map((start, i) => [start, cuts[i + 1]! - start] as const)
      .filter(([, len]) => len > 0);
  });
  let boxes: Box[] = [{ offsets: [], sizes: [] }];
  for (const range of ranges)
    boxes = boxes.flatMap((b) => range.map(([o, s]) => ({ offsets: [...b.offsets, o], sizes: [...b.sizes, s] })));
  return boxes;
}
