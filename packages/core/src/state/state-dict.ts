import type { ShardedTensor } from "./sharded-tensor.js";
import type { HostTensor, TensorLike } from "./tensors.js";

/**
 * A key path: the keys from the state dict's root to a leaf. Strings are object keys,
 * numbers are array indices. Paths are stored as arrays so every key round-trips exactly,
 * whatever characters it holds; `displayKey` is only for messages.
 */
export type KeyPath = readonly (string | number)[];

export type JsonPrimitive = string | number | boolean | null;

/**
 * An object that saves as the state dict it returns and restores from one, like
 * `torch.distributed.checkpoint.stateful.Stateful`. On save Cairn calls `stateDict()` and
 * saves what it returns; on load it calls `stateDict()` for a target, fills it, then calls
 * `loadStateDict(filled)`.
 */
export interface Stateful {
  stateDict(): StateDict | Promise<StateDict>;
  loadStateDict(stateDict: StateDict): void | Promise<void>;
}

export type StateValue =
  TensorLike | ShardedTensor | HostTensor | Uint8Array | JsonPrimitive | Stateful | StateDict | readonly StateValue[];

export interface StateDict {
  [key: string]: StateValue;
}

export function displayKey(path: KeyPath): string {
  return path.length === 0 ? "<root>" : path.join(".");
}

/**
 * Keys no state dict, metadata.json or user metadata may hold: assigned or merged into an
 * ordinary object, they reach its prototype (and through it every object of the process).
 */
const FORBIDDEN_KEYS: ReadonlySet<string> = new Set(["__proto__", "constructor", "prototype"]);

export function isForbiddenKey(key: string | number): boolean {
  return typeof key === "string" && FORBIDDEN_KEYS.has(key);
}

/** A stable string for a key path, for maps and comparisons (not for display). */
export function pathId(path: KeyPath): string {
  return JSON.stringify(path);
}

/** Containers (and user metadata) nested deeper than this are refused on save: every walk over them stays well within the stack. */
export const MAX_STATE_DEPTH = 512;
