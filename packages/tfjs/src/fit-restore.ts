import type * as tf from "@tensorflow/tfjs";
import { CheckpointError, type KeyPath, type StateDict, displayKey, flattenStateDict } from "@cairn/core";
import type { EntryMetadata } from "@cairn/core/format";
import type { CheckpointManager } from "@cairn/manager";
import { type FitLayout, FitPosition } from "./fit-position.js";
import { getStateDict, primeOptimizer, setStateDict } from "./state-dict.js";

/** Names at most this many keys of each kind in a message, then how many more. */
const NAMED = 8;

function listed(keys: readonly string[]): string {
  const shown = keys.slice(0, NAMED).join(", ");
  return keys.length > NAMED ? `${shown} and ${keys.length - NAMED} more` : shown;
}

function describeEntry(entry: EntryMetadata): string {
  if (entry.kind === "tensor") return `${entry.dtype} ${JSON.stringify(entry.shape)}`;
  return entry.kind === "bytes" ? "bytes" : "a value";
}

/**
 * Compares the entries a checkpoint holds under `state`'s top-level keys with the leaves `state`
 * asks for, and throws `mismatch` naming every missing, extra and mis-shaped one: a checkpoint
 * of another model is refused before anything is assigned (a strict load would name only the
 * first missing leaf, and ignore extra ones).
 */
async function checkEntries(
  entries: readonly EntryMetadata[],
  state: StateDict,
  what: string,
  where: string,
): Promise<void> {
  const tops = new Set(Object.keys(state));
  const id = (path: KeyPath): string => JSON.stringify(path);
  const saved = new Map(entries.filter((e) => tops.has(String(e.key[0]))).map((e) => [id(e.key), e]));
  const missing: string[] = [];
  const misshapen: string[] = [];
  let firstMisshapen: string | undefined;
  for (const leaf of await flattenStateDict(state)) {
    const entry = saved.get(id(leaf.path));
    saved.delete(id(leaf.path));
    if (!entry) missing.push(displayKey(leaf.path));
    else if (
      leaf.kind === "tensor"
        ? entry.kind !== "tensor" ||
          entry.dtype !== leaf.dtype ||
          entry.shape.length !== leaf.shape.length ||
          entry.shape.some((n, i) => n !== leaf.shape[i])
        : entry.kind !== leaf.kind
    ) {
      const here = leaf.kind === "tensor" ? `${leaf.dtype} ${JSON.stringify(leaf.shape)}` : leaf.kind;
      firstMisshapen ??= displayKey(leaf.path);
      misshapen.push(`${displayKey(leaf.path)} (checkpoint ${describeEntry(entry)}, here ${here})`);
    }
  }
  const extra = [...saved.values()].map((e) => displayKey(e.key));
  if (missing.length + extra.length + misshapen.length === 0) return;
  const parts = [
    missing.length > 0 ? `missing ${listed(missing)}` : "",
    extra.length > 0 ? `extra ${listed(extra)}` : "",
    misshapen.length > 0 ? `mis-shaped ${listed(misshapen)}` : "",
  ].filter(Boolean);
  throw new CheckpointError(
    "mismatch",
    `${where} is not a checkpoint of this ${what}: ${parts.join("; ")}. Restore it into the model it was saved from, or use another root`,
    { context: { key: missing[0] ?? extra[0] ?? firstMisshapen! } },
  );
}

/** A committed step's fit position and entries, from its metadata alone (no tensor is read). */
export async function readFitPosition(
  manager: CheckpointManager,
  step: number,
  where: string,
): Promise<{ position: FitPosition; entries: readonly EntryMetadata[] }> {
  const { metadata } = await manager.restore(step, {});
  return { position: FitPosition.fromEntries(metadata.entries, where), entries: metadata.entries };
}

/** Refuses a checkpoint of a run over other data: resuming it would not skip the batches already trained. */
export function checkSameRun(saved: FitPosition, layout: FitLayout, seed: number | undefined, where: string): void {
  const describe = (l: FitLayout): string =>
    l.kind === "fitDataset"
      ? `fitDataset with ${l.batchesPerEpoch === null ? "passes to the end of the data" : `batchesPerEpoch ${l.batchesPerEpoch}`}`
      : `fit over ${l.samples} samples in batches of ${l.batchSize}, ${l.shuffle ? "shuffled" : "in order"}`;
  const a = saved.layout;
  if (
    a.kind !== layout.kind ||
    a.batchesPerEpoch !== layout.batchesPerEpoch ||
    a.samples !== layout.samples ||
    a.batchSize !== layout.batchSize ||
    a.shuffle !== layout.shuffle
  ) {
    throw new CheckpointError(
      "mismatch",
      `${where} holds the data position of another run (${describe(a)}), not of this call (${describe(layout)}): its batches cannot be skipped exactly; use another root or the same data settings`,
      { context: { key: "fit.layout" } },
    );
  }
  if (seed !== undefined && seed !== saved.seed) {
    throw new CheckpointError(
      "mismatch",
      `${where} holds a run with seed ${saved.seed}, not ${seed}: its data order and dropout masks would not continue; use another root or seed ${saved.seed}`,
      { context: { key: "fit.seed" } },
    );
  }
}

/**
 * Restores a step's weights and optimizer state into `model` and its optimizer, after checking
 * that the checkpoint is one of this model (every weight there and of the same shape, nothing
 * more) and of this optimizer; nothing is assigned when it is not. The optimizer is primed
 * first, so its lazily created state exists to be filled.
 */
export async function restoreTraining(
  manager: CheckpointManager,
  step: number,
  model: tf.LayersModel,
  entries: readonly EntryMetadata[],
  where: string,
): Promise<void> {
  const optimizer = model.optimizer;
  await checkEntries(entries, await getStateDict(model), "model", where);
  const kind = ((await getStateDict(model, optimizer)).optim as StateDict).kind;
  const saved = entries.find((e) => e.key.length === 2 && e.key[0] === "optim" && e.key[1] === "kind");
  const savedKind = saved?.kind === "value" ? saved.value : undefined;
  if (savedKind !== kind) {
    throw new CheckpointError(
      "mismatch",
      `${where} holds ${typeof savedKind === "string" ? `${savedKind} optimizer state` : "no optimizer state"}, but the model is compiled with ${String(kind)}; compile it with the optimizer the run used`,
      { context: { key: "optim.kind" } },
    );
  }
  await primeOptimizer(optimizer, model);
  const state = await getStateDict(model, optimizer);
  await checkEntries(entries, { optim: state.optim! }, "model's optimizer", where);
  await manager.restore(step, state);
  await setStateDict(model, optimizer, state);
}
