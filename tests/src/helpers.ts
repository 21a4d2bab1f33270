import { mkdtemp, open, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type DType, type HostTensor, DTYPE_NAMES, hostTensor } from "@cairn/core";
import { crc32c, numel } from "@cairn/core/format";
import { afterAll } from "vitest";
import "@cairn/storage-local";

const dirs: string[] = [];
afterAll(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

/** A fresh directory, removed when the test file ends. */
export async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "cairn-test-"));
  dirs.push(dir);
  return dir;
}

let memory = 0;
/** A fresh checkpoint location for each kind of local storage. */
export const locations: Record<"file" | "memory", () => Promise<string>> = {
  file: async () => `file://${await tempDir()}/ckpt`,
  memory: async () => `memory://tests-${process.pid}-${memory++}/ckpt`,
};

/** Deterministic values of every bit pattern class a dtype has (negative, large, NaN bits for floats). */
export function sampleTensor(dtype: DType, shape: readonly number[], seed = 1): HostTensor {
  const t = hostTensor(dtype, shape);
  const n = numel(shape);
  let x = seed * 2654435761;
  const next = (): number => {
    x = (x ^ (x << 13)) >>> 0;
    x = (x ^ (x >>> 17)) >>> 0;
    x = (x ^ (x << 5)) >>> 0;
    return x;
  };
  for (let i = 0; i < n; i++) {
    const r = next();
    const data = t.data as unknown as { [i: number]: number | bigint };
    switch (dtype) {
      case "int64":
        data[i] = (BigInt(r) << 32n) | BigInt(next()) | (i % 2 ? -(1n << 62n) : 0n);
        break;
      case "uint64":
        data[i] = (BigInt(r) << 32n) | BigInt(next());
        break;
      case "bool":
        data[i] = r & 1;
        break;
      case "float32":
      case "float64":
        data[i] = i === 1 ? NaN : i === 2 ? -0 : (r / 2 ** 16) * (i % 2 ? -1 : 1);
        break;
      default:
        data[i] = r;
    }
  }
  return t;
}

export { DTYPE_NAMES };

/** Byte-for-byte equality of two host tensors (NaN payloads and -0 included). */
export function sameBits(a: HostTensor, b: HostTensor): boolean {
  if (a.dtype !== b.dtype || JSON.stringify(a.shape) !== JSON.stringify(b.shape)) return false;
  const x = new Uint8Array(a.data.buffer, a.data.byteOffset, a.data.byteLength);
  const y = new Uint8Array(b.data.buffer, b.data.byteOffset, b.data.byteLength);
  return Buffer.from(x).equals(Buffer.from(y));
}

/**
 * Rewrites a file:// checkpoint's metadata.json (its raw JSON, without the checksum field) as `edit`
 * returns it, with a fresh checksum: the
 * way a crafted checkpoint is made (the checksum finds damage; it does not authenticate).
 */
export async function rewriteMetadata(
  dir: string,
  edit: (metadata: Record<string, unknown>) => unknown,
): Promise<void> {
  const path = join(dir, "metadata.json");
  const { metadataCrc32c: _, ...metadata } = JSON.parse(await readFile(path, "utf8")) as Record<string, unknown>;
  const body = JSON.stringify(edit(metadata));
  await writeFile(path, `{"metadataCrc32c":${crc32c(new TextEncoder().encode(body))},${body.slice(1)}`);
}

/** Everything a prototype pollution would change: the own keys of the prototypes every object shares. */
export function sharedPrototypes(): Record<string, string[]> {
  const keys = (o: object): string[] => Reflect.ownKeys(o).map(String).sort();
  return {
    object: keys(Object.prototype),
    array: keys(Array.prototype),
    function: keys(Function.prototype),
    literal: keys(Object.getPrototypeOf({}) as object),
    nullLiteral: [String(Object.getPrototypeOf(Object.prototype))],
  };
}

/** Flips the lowest bit of the byte at `offset` of the file at `path`. */
export async function flipByte(path: string, offset: number): Promise<void> {
  const handle = await open(path, "r+");
  const byte = Buffer.alloc(1);
  await handle.read(byte, 0, 1, offset);
  byte[0] = byte[0]! ^ 0x01;
  await handle.write(byte, 0, 1, offset);
  await handle.close();
}
