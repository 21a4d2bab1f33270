import { readFile, readdir } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { type DType, type HostTensor, hostTensor, isShardedTensor, shardedTensor } from "@cairn/core";
import { memoryVolume } from "@cairn/storage-local";

// What the plan cache's tests share: random tensors, copies of states, and a checkpoint's files as written.

type Random = () => number;

export function filled(dtype: DType, shape: readonly number[], random: Random): HostTensor {
  const t = hostTensor(dtype, shape);
  const bytes = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(random() * 256);
  return t;
}

/** A copy of the state sharing nothing with it: the next save sees new objects of the same structure. */
export function copied(value: unknown): unknown {
  if (typeof value !== "object" || value === null) return value;
  if (value instanceof Uint8Array) return value.slice();
  if (isShardedTensor(value))
    return shardedTensor(
      value.dtype,
      [...value.shape],
      value.shards.map((s) => ({ offsets: [...s.offsets], tensor: copied(s.tensor) as HostTensor })),
    );
  if ("dtype" in value && "data" in value) {
    const t = value as HostTensor;
    return hostTensor(t.dtype, [...t.shape], t.data.slice());
  }
  if (Array.isArray(value)) return value.map(copied);
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, copied(v)]));
}

/** Raw files of a saved checkpoint by name, the attempt id in data file names replaced. */
export async function filesOf(url: string): Promise<Map<string, Buffer>> {
  const files = new Map<string, Buffer>();
  if (url.startsWith("memory://")) {
    const dir = `/${url.slice("memory://".length)}`;
    const volume = memoryVolume();
    for (const name of volume.readdirSync(dir) as string[])
      files.set(name, volume.readFileSync(`${dir}/${name}`) as Buffer);
  } else {
    const dir = fileURLToPath(url);
    for (const name of await readdir(dir)) files.set(name, await readFile(`${dir}/${name}`));
  }
  const attempt = [...files.keys()].map((name) => /-([0-9a-f]{12})\.safetensors$/.exec(name)?.[1]).find(Boolean);
  const normal = new Map<string, Buffer>();
  for (const [name, bytes] of files) {
    let content = bytes;
    if (name === "metadata.json") {
      // The attempt id, the time and the checksum over both differ between any two saves.
      let text = bytes.toString("utf8").replace(/^\{"metadataCrc32c":\d+,/, "{");
      text = text.replace(/"createdAt":"[^"]*"/, '"createdAt":""');
      if (attempt) text = text.replaceAll(attempt, "ATTEMPT");
      content = Buffer.from(text);
    }
    normal.set(attempt ? name.replace(attempt, "ATTEMPT") : name, content);
  }
  return normal;
}

/** The state with every typed array as its bytes, for a bit-exact comparison. */
export function bits(value: unknown): unknown {
  if (typeof value !== "object" || value === null) return Object.is(value, -0) ? "-0" : value;
  if (ArrayBuffer.isView(value)) return Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString("hex");
  if (Array.isArray(value)) return value.map(bits);
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, bits(v)]));
}
