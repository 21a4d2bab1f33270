// The OPFS read workers in a page: a ranged read asked for block checksums gets them from the
// workers, equal to core's; a byte flipped in a tensor read straight into place fails the load.
import { exposeToTests } from "@cairn/browser-testing/page";
import { hostTensor, load, save } from "@cairn/core";
import { blockChecksums } from "@cairn/core/format";
import { openOpfsStorage } from "../../src/index.js";

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

exposeToTests({ hashedRead, flippedLoad });
