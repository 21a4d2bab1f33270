import { readFile, readdir } from "node:fs/promises";
import { join } from "node:path";
import { type HostTensor, type StateDict, hostTensor, load, save } from "@cairn/core";
import { parseSafetensorsHeader } from "@cairn/core/format";
import { describe, expect, it } from "vitest";
import { flipByte, tempDir } from "./helpers.js";

/**
 * Files of many small tensors are packed with their header into page-aligned memory on the
 * calling thread and hashed there by a checksum worker in one pass over a list of regions.
 * Odd sizes (so no two tensors start on the same alignment), an empty one, and a block size
 * far below the tensors' sizes (so most have several blocks and a short last one) check that
 * every chunk gets its own checksums, in order, over exactly its bytes.
 */
const COUNT = 3_001;
const BLOCK = 100;

function state(seed: number): { state: StateDict; tensors: (HostTensor | Uint8Array)[] } {
  const tensors: (HostTensor | Uint8Array)[] = [];
  const layers = Array.from({ length: COUNT }, (_, i) => {
    let value: HostTensor | Uint8Array;
    if (i % 3 === 0) value = new Uint8Array((i * 37) % 701).map((_, j) => (i * 31 + j * 7 + seed) & 255);
    else if (i % 3 === 1)
      value = hostTensor(
        "float32",
        [(i % 97) + 1],
        new Float32Array((i % 97) + 1).map((_, j) => i + j / 8 + seed),
      );
    else
      value = hostTensor(
        "int16",
        [(i % 53) + 2, 3],
        new Int16Array(((i % 53) + 2) * 3).map((_, j) => (i * 5 - j + seed) % 30_000),
      );
    tensors.push(value);
    return { w: value };
  });
  return { state: { layers }, tensors };
}

function bytesOf(value: HostTensor | Uint8Array): Buffer {
  const data = value instanceof Uint8Array ? value : value.data;
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

describe("saving many small tensors packed into page-aligned memory", () => {
  it("round-trips 3,001 odd-sized tensors, every block of every chunk checked on load", async () => {
    const dir = join(await tempDir(), "ckpt");
    const saved = state(1);
    await save(saved.state, { checkpointId: dir, blockSize: BLOCK, concurrency: 3 });
    const back = (await load(dir)) as { layers: { w: HostTensor | Uint8Array }[] };
    expect(back.layers).toHaveLength(COUNT);
    saved.tensors.forEach((t, i) => expect(bytesOf(back.layers[i]!.w).equals(bytesOf(t)), `tensor ${i}`).toBe(true));
    // Most chunks span several blocks: the packed path's sums were split per chunk.
    const metadata = await readFile(join(dir, "metadata.json"), "utf8");
    expect(metadata.length).toBeGreaterThan(COUNT * 20);
  });

  it("fails the load when one byte of a packed tensor changes", async () => {
    const dir = join(await tempDir(), "ckpt");
    await save(state(2).state, { checkpointId: dir, blockSize: BLOCK, concurrency: 1 });
    const [file] = (await readdir(dir)).filter((name) => name.endsWith(".safetensors"));
    const size = (await readFile(join(dir, file!))).byteLength;
    // Near the end: in the last tensors, after the header and far from the first block.
    await flipByte(join(dir, file!), size - 3);
    await expect(load(dir)).rejects.toMatchObject({ code: "corrupt" });
  });

  it("saves one data file of more items than a call takes arguments (200,000 scalars)", async () => {
    // 800 KB in all: one file. Its chunks were gathered with push(...chunks), which overflows the stack from about 150k.
    const count = 200_000;
    const dir = join(await tempDir(), "ckpt");
    const values = Array.from({ length: count }, (_, i) => hostTensor("float32", [], new Float32Array([i])));
    const saved = await save({ values }, dir);
    expect(saved).toMatchObject({ files: 1, entries: count });
    const back = (await load(dir)) as { values: HostTensor[] };
    expect(back.values).toHaveLength(count);
    expect([back.values[0]!.data[0], back.values[count - 1]!.data[0]]).toEqual([0, count - 1]);
  }, 120_000);

  it("names tensors whose dotted keys collide apart in the data file's header", async () => {
    const dir = join(await tempDir(), "ckpt");
    const t = (v: number): HostTensor => hostTensor("float32", [4], new Float32Array(4).fill(v));
    await save({ "a.b": t(1), a: { b: t(2), c: t(3) } }, { checkpointId: dir, concurrency: 1 });
    const [file] = (await readdir(dir)).filter((name) => name.endsWith(".safetensors"));
    const header = parseSafetensorsHeader(await readFile(join(dir, file!)));
    expect([...header.tensors.keys()].sort()).toEqual(["a.b", "a.b#2", "a.c"]);
    const back = (await load(dir)) as Record<string, unknown> & { a: { b: HostTensor } };
    expect((back["a.b"] as HostTensor).data[0]).toBe(1);
    expect(back.a.b.data[0]).toBe(2);
  });
});
