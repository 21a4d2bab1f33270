import { type StorageAdapter, load } from "@cairn/core";
import { StepStore } from "../steps/step-store.js";

/** The value a step's copy of a `smallState` holds, checking the whole state is that one value. */
export async function valueOf(storage: StorageAdapter, step: number): Promise<number> {
  const state = (await load({ storage, path: String(step) })) as unknown as { w: { data: Float32Array }; step: number };
  const values = new Set([...state.w.data, state.step]);
  if (values.size !== 1) throw new Error(`step ${step} under ${storage.root} mixes values ${[...values].join(",")}`);
  return state.step;
}

/** Each step committed under `storage` with the value its copy holds. */
export async function listedValues(storage: StorageAdapter): Promise<Map<number, number>> {
  const out = new Map<number, number>();
  for (const step of await new StepStore(storage).committedSteps()) out.set(step, await valueOf(storage, step));
  return out;
}
