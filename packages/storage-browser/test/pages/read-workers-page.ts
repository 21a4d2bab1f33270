// The OPFS read workers in a page: a ranged read asked for block checksums gets them from the
// workers, equal to core's; a byte flipped in a tensor read straight into place fails the load.
import { exposeToTests } from "@cairn/browser-testing/page";
import { hostTensor, load, save } from "@cairn/core";
import { blockChecksums } from "@cairn/core/format";
import { giveBackReusableMemory, pageAlignedSharedBytes } from "@cairn/core/storage";
import { openOpfsStorage } from "../../src/index.js";
import { OpfsReadWorkers } from "../../src/opfs-read-workers.js";

function pattern(length: number, seed: number): Uint8Array {
  const bytes = new Uint8Array(length);
  let x = seed;
  for (let i = 0; i < bytes.length; i++) bytes[i] = (x = (x * 1103515245 + 12345) >>> 0) >>> 24;
  return bytes;
}

/** Writes an object and reads a range of it asking for the CRC32C of every `blockSize` bytes. */
async function hashedRead(
  offset: number,
  length: number,
  blockSize: number,
): Promise<{ sums: number[] | null; expected: number[]; same: boolean }> {
  const storage = openOpfsStorage(new URL("opfs://read-workers/hashed"));
  const bytes = pattern(3 * blockSize + 5, 7);
  await storage.write("object", bytes);
  let sums: Uint32Array | null = null;
  const into = new Uint8Array(length);
  const got = await storage.read(
    "object",
    { offset, length },
    { into, blockChecksums: { blockSize, onChecksums: (computed) => (sums = computed) } },
  );
  const wanted = bytes.subarray(offset, offset + length);
  const same =
    got.byteLength === wanted.byteLength && got.every((b, i) => b === wanted[i]) && got.buffer === into.buffer;
  return { sums: sums ? [...(sums as Uint32Array)] : null, expected: blockChecksums(wanted, blockSize), same };
}

/** Saves one 4 MiB tensor (read straight into its target on load), flips a byte of it in OPFS, loads it again. */
async function flippedLoad(): Promise<string[]> {
  const root = "opfs://read-workers/flipped";
  const source = hostTensor(
    "float32",
    [1 << 20],
    new Float32Array(1 << 20).map((_, i) => i * 0.5),
  );
  await save({ w: source }, root);
  const outcomes: string[] = [];
  const attempt = async (): Promise<void> => {
    try {
      await load({ w: hostTensor("float32", [1 << 20]) }, root);
      outcomes.push("loaded");
    } catch (error) {
      outcomes.push(`${(error as { code?: string }).code}: ${(error as Error).message}`);
    }
  };
  await attempt();
  let dir = await navigator.storage.getDirectory();
  for (const name of ["read-workers", "flipped"]) dir = await dir.getDirectoryHandle(name);
  for await (const [name, handle] of (
    dir as unknown as { entries(): AsyncIterable<[string, FileSystemFileHandle]> }
  ).entries()) {
    if (!name.endsWith(".safetensors")) continue;
    const bytes = new Uint8Array(await (await handle.getFile()).arrayBuffer());
    bytes[bytes.length - (3 << 20)]! ^= 0x04;
    const writable = await handle.createWritable();
    await writable.write(bytes);
    await writable.close();
  }
  await attempt();
  return outcomes;
}

const MiB = 1 << 20;

/** Reads of the read workers answered so far: through a sync access handle, by slicing, hashed in WebAssembly. */
function answered(): { locked: number; sliced: number; hashedInWasm: number } {
  return { ...(OpfsReadWorkers.shared()?.answered ?? { locked: 0, sliced: 0, hashedInWasm: 0 }) };
}

/**
 * Writes a 9 MiB object and reads `count` ranges of 2 MiB + 3 of it at once, each into memory of
 * its own with block checksums: whether every range came back right, and how the workers read them.
 */
async function largeReads(
  count: number,
  sharedInPool = false,
): Promise<{ same: boolean; sumsRight: boolean; locked: number; sliced: number; hashedInWasm: number }> {
  const storage = openOpfsStorage(new URL("opfs://read-workers/large"));
  const bytes = pattern(9 * MiB, 11);
  await storage.write("object", bytes);
  // Shared memory (a save's staging, say) in the process's reusable memory cannot be lent to a worker.
  if (sharedInPool) for (let i = 0; i < count; i++) giveBackReusableMemory(pageAlignedSharedBytes(4 * MiB));
  const before = answered();
  const length = 2 * MiB + 3;
  const results = await Promise.all(
    Array.from({ length: count }, async (_, i) => {
      const offset = (i * 1_000_003) % (bytes.byteLength - length);
      let sums: Uint32Array | undefined;
      const into = new Uint8Array(length);
      const got = await storage.read(
        "object",
        { offset, length },
        { into, blockChecksums: { blockSize: MiB, onChecksums: (computed) => (sums = computed) } },
      );
      const wanted = bytes.subarray(offset, offset + length);
      const same = got.buffer === into.buffer && got.byteLength === length && got.every((b, j) => b === wanted[j]);
      const expected = blockChecksums(wanted, MiB);
      return { same, sumsRight: sums !== undefined && [...sums].every((s, j) => s === expected[j]) };
    }),
  );
  const after = answered();
  return {
    same: results.every((r) => r.same),
    sumsRight: results.every((r) => r.sumsRight),
    locked: after.locked - before.locked,
    sliced: after.sliced - before.sliced,
    hashedInWasm: after.hashedInWasm - before.hashedInWasm,
  };
}

/**
 * Opens a reader on a 2 MiB object, replaces the object with other bytes of the same size, and
 * reads through the reader: "old" (the snapshot's bytes), "new" (the replacement's: wrong) or the error's code.
 */
async function replacedUnderReader(): Promise<string> {
  const storage = openOpfsStorage(new URL("opfs://read-workers/replaced"));
  const [first, second] = [pattern(2 * MiB, 1), pattern(2 * MiB, 2)];
  await storage.write("object", first);
  const reader = await storage.openReader("object");
  await new Promise((resolve) => setTimeout(resolve, 20));
  await storage.write("object", second);
  try {
    const got = await reader.read({ offset: 0, length: 2 * MiB }, { into: new Uint8Array(2 * MiB) });
    return got.every((b, i) => b === first[i]) ? "old" : got.every((b, i) => b === second[i]) ? "new" : "mixed";
  } catch (error) {
    return `error: ${(error as { code?: string }).code}`;
  } finally {
    await reader.close();
  }
}

/**
 * Deletes a 32 MiB object while 4 reads of 8 MiB of it are in flight (read-only sync access
 * handles lock it meanwhile), `rounds` times: the deletes' outcomes, and whether each object was gone.
 */
async function deleteWhileReading(rounds: number): Promise<{ deleted: string[]; gone: boolean[] }> {
  const storage = openOpfsStorage(new URL("opfs://read-workers/deleted"));
  const [deleted, gone]: [string[], boolean[]] = [[], []];
  for (let round = 0; round < rounds; round++) {
    await storage.write("object", pattern(32 * MiB, 3));
    const reads = Array.from({ length: 4 }, (_, i) =>
      storage.read("object", { offset: i * 8 * MiB, length: 8 * MiB }, { into: new Uint8Array(8 * MiB) }),
    );
    await new Promise((resolve) => setTimeout(resolve, 2 + round));
    deleted.push(
      await storage.delete("object").then(
        () => "ok",
        (error: unknown) => (error as Error).message,
      ),
    );
    await Promise.allSettled(reads);
    gone.push((await storage.stat("object")) === null);
  }
  return { deleted, gone };
}

exposeToTests({ hashedRead, flippedLoad, largeReads, replacedUnderReader, deleteWhileReading });
