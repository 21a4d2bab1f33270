import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type HostTensor, type StateDict, hostTensor, load, readMetadata, save } from "@cairn/core";
import { blockChecksums, loadXxh128 } from "@cairn/core/format";
import { verifyCheckpoint } from "@cairn/core/ops";
import { openStorage } from "@cairn/core/storage";
import { seededRandom } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";
import { freePort } from "../src/launch-ranks.js";
import { connectTcpProcessGroup } from "../src/tcp-process-group.js";

const bytesOf = (t: HostTensor): Uint8Array => new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);

/** Tensors of odd sizes, some empty, two of them bigger than a window (8 MiB), one of those 2-D. */
function state(seed: number): Record<string, HostTensor> {
  const random = seededRandom(seed);
  const sd: Record<string, HostTensor> = {};
  for (let i = 0; i < 40; i++) {
    const length = i % 9 === 0 ? 0 : i === 11 ? 2_200_001 : 1 + i * 511;
    sd[`k${i}`] = hostTensor(i % 3 ? "float32" : "int8", [length]);
  }
  sd["big"] = hostTensor("float32", [3, 750_001]);
  for (const t of Object.values(sd)) {
    const bytes = bytesOf(t);
    for (let j = 0; j < bytes.length; j += 3) bytes[j] = (random() * 256) | 0;
  }
  return sd;
}

const root = await mkdtemp(join(tmpdir(), "cairn-ranks-windows-"));
afterAll(() => rm(root, { recursive: true, force: true }));

describe("4 ranks of one process saving through the shared windows", () => {
  it("commit steps whose checksums are the tensors' own, that verify and load back bit-exact", async () => {
    const port = await freePort();
    const groups = await Promise.all(
      [0, 1, 2, 3].map((rank) =>
        connectTcpProcessGroup({ rank, worldSize: 4, host: "127.0.0.1", port, timeoutMs: 60_000 }),
      ),
    );
    try {
      const xxh = await loadXxh128();
      const storage = await openStorage(`file://${root}`);
      for (const step of [1, 2]) {
        const sd = state(step);
        const url = `file://${root}/run/${step}`;
        await Promise.all(groups.map((group) => save(sd, { checkpointId: url, processGroup: group })));
        const metadata = await readMetadata(url);
        for (const entry of metadata.entries) {
          if (entry.kind !== "tensor") continue;
          const bytes = bytesOf(sd[entry.key.join(".")]!);
          for (const chunk of entry.chunks) {
            expect(chunk.sizes, entry.key.join(".")).toEqual(entry.shape);
            expect(chunk.crc32c, entry.key.join(".")).toEqual(blockChecksums(bytes, chunk.blockSize));
            expect(chunk.hash, entry.key.join(".")).toBe(xxh.hash(bytes));
          }
        }
        const report = await verifyCheckpoint(storage, `run/${step}`, metadata);
        expect(report.damaged).toEqual([]);
        expect(report.entries).toBe(Object.keys(sd).length);
        const target: StateDict = {};
        for (const [key, t] of Object.entries(sd)) target[key] = hostTensor(t.dtype, t.shape);
        await load(target, url);
        for (const [key, t] of Object.entries(sd))
          expect(Buffer.compare(bytesOf(target[key] as HostTensor), bytesOf(t)), key).toBe(0);
      }
      await storage.close();
    } finally {
      await Promise.allSettled(groups.map((group) => group.close()));
    }
  }, 120_000);
});
