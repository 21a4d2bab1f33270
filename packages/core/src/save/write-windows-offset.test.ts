// Window memory that starts past its buffer's byte 0 (huge-page windows do): the file's bytes and
// every checksum must come from the window's own bytes, not from the buffer's start.
import { describe, expect, it, vi } from "vitest";
import { blockChecksums } from "../format/crc32c.js";
import type { SafetensorsLayout } from "../format/safetensors.js";
import { loadXxh128 } from "../format/xxh128.js";
import type { WriteItem } from "../plan/save-planner.js";
import type { Leaf } from "../state/leaf.js";
import type { DType } from "../state/dtypes.js";
import { hostTensor } from "../state/tensors.js";
import { seededRandom } from "../testing/seeded-random.js";
import type * as WindowMemory from "./window-memory.js";

const PAGE = 4096;
/** Where each window handed out starts in its buffer: a page in (as huge pages), off a page, off 8 bytes. */
const OFFSETS = [PAGE, 3 * PAGE, PAGE + 8, 5, PAGE + 2];
let taken = 0;
const offsetsUsed = new Set<number>();

vi.mock("./window-memory.js", async (original) => {
  const real = await original<typeof WindowMemory>();
  return {
    ...real,
    takeWindowMemory: (bytes: number) => {
      const offset = OFFSETS[taken++ % OFFSETS.length]!;
      offsetsUsed.add(offset);
      // Bytes around the window hold junk, which a view from the buffer's 0 would write or hash.
      const buffer = new SharedArrayBuffer(offset + bytes + PAGE);
      new Uint8Array(buffer).fill(0xa5);
      return new Uint8Array(buffer, offset, bytes);
    },
    giveBackWindowMemory: () => undefined,
  };
});

const { WINDOW_BYTES, writeThroughWindows } = await import("./write-windows.js");

const DTYPES: readonly DType[] = ["float32", "float64", "int16", "int8", "uint8", "int32", "int64", "float16"];

describe("writeThroughWindows with window memory that starts past its buffer's byte 0", () => {
  it("writes every byte and checksum of host tensors, bytes and split items from the window itself", async () => {
    const xxh = await loadXxh128();
    for (let seed = 1; seed <= 24; seed++) {
      const random = seededRandom(seed);
      const windowBytes = [8192, 16384, 12288 + 24][seed % 3]!;
      const headerBytes = 8 + 8 * Math.floor(random() * 300);
      const header = new Uint8Array(headerBytes).map(() => (random() * 256) | 0);
      const leaves: Leaf[] = [];
      const datas: Uint8Array[] = [];
      const blockSizes: number[] = [];
      const offsets: number[] = [];
      let end = headerBytes;
      const count = 5 + Math.floor(random() * 25);
      for (let i = 0; i < count; i++) {
        // Host tensors of every element size (copied through typed views), raw bytes, and items
        // bigger than a window (cut into pieces on their blocks).
        const big = random() < 0.15;
        const dtype = DTYPES[Math.floor(random() * DTYPES.length)]!;
        const type = hostTensor(dtype, [0]).data.constructor as new (buffer: ArrayBuffer) => {
          BYTES_PER_ELEMENT: number;
        };
        const size = new type(new ArrayBuffer(0)).BYTES_PER_ELEMENT;
        const elements = Math.floor(((big ? 3 * windowBytes : 2000) * random()) / size);
        const bytes = new Uint8Array(elements * size).map(() => (random() * 256) | 0);
        if (random() < 0.3) {
          leaves.push({ kind: "bytes", path: [`b${i}`], data: bytes });
        } else {
          const typed = new type(bytes.slice().buffer);
          leaves.push({
            kind: "tensor",
            path: [`t${i}`],
            dtype,
            shape: [elements],
            source: { kind: "host", tensor: hostTensor(dtype, [elements], typed as never) },
          } as Leaf);
        }
        datas.push(bytes);
        blockSizes.push(2 ** (9 + Math.floor(random() * 5)));
        offsets.push(end);
        end += bytes.byteLength;
      }
      const items = datas.map(
        (d, i) => ({ leafIndex: i, key: [`k${i}`], byteLength: d.byteLength }) as unknown as WriteItem,
      );
      const layout: SafetensorsLayout = { header, offsets, fileSize: end };
      const out = new Uint8Array(end);
      const got = await writeThroughWindows(
        items,
        leaves,
        layout,
        blockSizes,
        Math.min(windowBytes, WINDOW_BYTES),
        () => true,
        undefined,
        (attempt) =>
          attempt(async (body, { onWritten }) => {
            let at = 0;
            for await (const part of body) {
              out.set(part, at);
              at += part.byteLength;
              onWritten?.(at);
            }
          }),
      );
      const want = new Uint8Array(end);
      want.set(header, 0);
      datas.forEach((d, i) => want.set(d, offsets[i]!));
      expect(Buffer.compare(out, want), `bytes, seed ${seed}`).toBe(0);
      datas.forEach((d, i) => {
        expect(got.sums[i], `sums, seed ${seed} item ${i}`).toEqual(blockChecksums(d, blockSizes[i]!));
        expect(got.hashed[i], `hashed, seed ${seed} item ${i}`).toBe(1);
        expect(
          Buffer.from(got.digests.subarray(16 * i, 16 * i + 16)).toString("hex"),
          `hash, seed ${seed} item ${i}`,
        ).toBe(xxh.hash(d));
      });
    }
    expect([...offsetsUsed].sort((a, b) => a - b)).toEqual([...OFFSETS].sort((a, b) => a - b));
  }, 60_000);
});
