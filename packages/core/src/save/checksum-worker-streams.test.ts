import { Worker } from "node:worker_threads";
import { describe, expect, it } from "vitest";
import { blockChecksums } from "../format/crc32c.js";
import { loadXxh128 } from "../format/xxh128.js";
import { seededRandom } from "../testing/seeded-random.js";
import { WORKER_SOURCE, workerModules } from "./checksum-workers.js";

// One worker hashes many saves' regions: whole small chunks (hash-wasm's exports), whole chunks of
// several blocks, and big chunks in pieces over several messages whose streams stay open between
// them, interleaved. No digest may take another chunk's state, a previous message's bytes or a
// stream's stale state: every one is compared with a one-shot XXH3-128 of the chunk's bytes.

interface Chunk {
  readonly start: number;
  readonly length: number;
  readonly blockSize: number;
  /** Piece boundaries (on whole blocks), the first 0 and the last `length`; [0, length] for a whole chunk. */
  readonly cuts: number[];
  readonly id: number;
  next: number;
}

interface Reply {
  sums: Uint32Array;
  hashes: Uint8Array;
}

/** Each of XXH3's length classes and the workers' 2 KiB / 4 KiB paths, and bigger. */
const SIZES = [0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1024, 2047, 2048, 2049, 4095, 4096, 4097, 9000];

async function runSchedule(seed: number, workerData: Record<string, unknown>): Promise<number> {
  const xxh = await loadXxh128();
  const random = seededRandom(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  const lengths = Array.from({ length: 120 }, () =>
    random() < 0.6 ? pick(SIZES) : Math.floor(random() * (random() < 0.2 ? 300_000 : 10_000)),
  );
  const memory = new SharedArrayBuffer(lengths.reduce((n, l) => n + l, 0));
  const bytes = new Uint8Array(memory);
  for (let i = 0; i < bytes.length; i++) bytes[i] = (random() * 256) | 0;
  let at = 0;
  const chunks: Chunk[] = lengths.map((length, i) => {
    const blockSize = 2 ** (10 + Math.floor(random() * 8));
    const cuts = [0];
    // Chunks of more than two blocks are often hashed in pieces over several messages.
    if (length > 2 * blockSize && random() < 0.7)
      for (
        let cut = blockSize * (1 + Math.floor(random() * 3));
        cut < length;
        cut += blockSize * (1 + Math.floor(random() * 4))
      )
        cuts.push(cut);
    cuts.push(length);
    const chunk = { start: at, length, blockSize, cuts, id: 1000 * seed + i + 1, next: 0 };
    at += length;
    return chunk;
  });
  const worker = new Worker(WORKER_SOURCE, { eval: true, workerData });
  let id = 0;
  const replies = new Map<number, (reply: Reply) => void>();
  worker.on("message", (reply: Reply & { id: number }) => replies.get(reply.id)?.(reply));
  const failed = new Promise<never>((_, reject) => worker.once("error", reject));
  let digests = 0;
  try {
    const pending = chunks.slice();
    while (pending.length > 0) {
      // A message of a few regions: the next piece of chunks taken at random, so streams interleave.
      const batch = new Set<Chunk>();
      for (let n = 1 + Math.floor(random() * 6); n > 0 && pending.length > 0; n--) batch.add(pick(pending));
      const regions = [...batch].map((chunk) => {
        const from = chunk.cuts[chunk.next]!;
        const to = chunk.cuts[chunk.next + 1]!;
        const whole = chunk.cuts.length === 2;
        const flags = whole ? 0 : (chunk.next === 0 ? 1 : 0) | (to === chunk.length ? 2 : 0);
        chunk.next++;
        if (to === chunk.length) pending.splice(pending.indexOf(chunk), 1);
        return { chunk, from, to, flags, stream: whole ? 0 : chunk.id };
      });
      const message = {
        id: ++id,
        regions: {
          buffer: memory,
          starts: Float64Array.from(regions, (r) => r.chunk.start + r.from),
          lengths: Float64Array.from(regions, (r) => r.to - r.from),
          blockSizes: Float64Array.from(regions, (r) => r.chunk.blockSize),
          count: regions.reduce((n, r) => n + Math.ceil((r.to - r.from) / r.chunk.blockSize), 0),
          streamIds: Float64Array.from(regions, (r) => r.stream),
          flags: Uint8Array.from(regions, (r) => r.flags),
        },
        withHashes: true,
      };
      const reply = await Promise.race([
        new Promise<Reply>((resolve) => {
          replies.set(message.id, resolve);
          worker.postMessage(message);
        }),
        failed,
      ]);
      let sum = 0;
      for (const [k, r] of regions.entries()) {
        const piece = bytes.subarray(r.chunk.start + r.from, r.chunk.start + r.to);
        const sums = blockChecksums(piece, r.chunk.blockSize);
        expect([...reply.sums.subarray(sum, sum + sums.length)], `seed ${seed} chunk ${r.chunk.id} piece`).toEqual(
          sums,
        );
        sum += sums.length;
        if (r.to !== r.chunk.length) continue;
        const whole = bytes.subarray(r.chunk.start, r.chunk.start + r.chunk.length);
        const digest = Buffer.from(reply.hashes.subarray(16 * k, 16 * k + 16)).toString("hex");
        expect(digest, `seed ${seed} chunk ${r.chunk.id} of ${r.chunk.length} bytes`).toBe(xxh.hash(whole));
        digests++;
      }
    }
  } finally {
    await worker.terminate();
  }
  return digests;
}

describe("a checksum worker's digests over interleaved saves", () => {
  const modules = workerModules();
  const modes: [string, Record<string, unknown>][] = [
    ["@cairn/crc32c-native's regionChecksums for whole chunks", { ...modules }],
    ["xxhash-addon and hash-wasm's exports", { ...modules, regions: false }],
    ["hash-wasm alone, through its exports", { ...modules, regions: false, xxhashAddon: "/nonexistent/xxhash-addon" }],
    [
      "hash-wasm alone, through its wrapper",
      { ...modules, regions: false, xxhashAddon: "/nonexistent/xxhash-addon", lean: false },
    ],
  ];
  for (const [name, workerData] of modes)
    it(`are each chunk's own one-shot XXH3-128: ${name} (seeded)`, async () => {
      let digests = 0;
      for (const seed of [1, 2, 3]) digests += await runSchedule(seed, workerData);
      expect(digests).toBe(3 * 120);
    }, 60_000);
});
