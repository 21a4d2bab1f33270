import { type StateDict, type StorageAdapter, hostTensor } from "@cairn/core";

/** A four-float state dict whose every value (and `step`) is `value`: tells saved steps apart. */
export function smallState(value: number): StateDict {
  return { w: hostTensor("float32", [4], Float32Array.of(value, value, value, value)), step: value };
}

/** Every object path under `prefix`, sorted. */
export async function objectNames(storage: StorageAdapter, prefix = ""): Promise<string[]> {
  const out: string[] = [];
  for await (const o of storage.list(prefix)) out.push(o.path);
  return out.sort();
}
