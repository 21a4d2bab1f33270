import { isDType, matchesArrayType, numel, unsupportedDType, validateShape } from "./dtypes.js";
import { CheckpointError, describeValue } from "../errors.js";
import { type ShardedTensor, isShardedTensor, shardBoxes } from "./sharded-tensor.js";
import {
  type KeyPath,
  type StateDict,
  type StateValue,
  type Stateful,
  displayKey,
  MAX_STATE_DEPTH,
  isForbiddenKey,
} from "./state-dict.js";
import { type HostTensor, type TensorLike, checkHostData } from "./tensors.js";
import { type Leaf, invalid, tfjsDType, whereKey } from "./leaf.js";

/**
 * What a value is: a leaf itself (no wrapper: a save of many tensors makes one per tensor), or
 * one of the others. A container's keys are listed by the caller; `ARRAY` and `OBJECT` are shared.
 */
type Classified =
  | Leaf
  | { readonly type: "stateful"; readonly object: Stateful }
  | { readonly type: "sharded"; readonly leaves: readonly Leaf[]; readonly sharded: ShardedTensor }
  | { readonly type: "array" }
  | { readonly type: "object" };

const ARRAY: Classified = { type: "array" };
const OBJECT: Classified = { type: "object" };

function isLeaf(classified: Classified): classified is Leaf {
  return (classified as { readonly type?: string }).type === undefined;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}

export function isTensorLike(value: unknown): value is TensorLike {
  return (
    isObject(value) && Array.isArray(value.shape) && typeof value.dtype === "string" && typeof value.data === "function"
  );
}

function looksLikeHostTensor(value: Record<string, unknown>): boolean {
  return "dtype" in value && "shape" in value && ArrayBuffer.isView(value.data);
}

export function isStateful(value: unknown): value is Stateful {
  return isObject(value) && typeof value.stateDict === "function" && typeof value.loadStateDict === "function";
}

function isPlainObject(value: Record<string, unknown>): boolean {
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/**
 * A copy of a tensor's shape (the caller may change its array in place once a background save
 * has staged), checked as `validateShape` checks it, which describes it when it is wrong: a
 * loop, where a copy and a check with a callback made two arrays and a closure per tensor.
 */
function shapeOf(shape: unknown, path: KeyPath): readonly number[] {
  if (Array.isArray(shape)) {
    const n = shape.length;
    const copy = new Array<number>(n);
    let ok = true;
    for (let i = 0; i < n; i++) {
      const d: unknown = shape[i];
      if (!Number.isSafeInteger(d) || (d as number) < 0) ok = false;
      copy[i] = d as number;
    }
    if (ok) return copy;
  }
  return validateShape(shape, whereKey(path));
}

function classify(value: unknown, path: KeyPath): Classified {
  switch (typeof value) {
    case "string":
    case "boolean":
    case "number":
      return { kind: "value", path, value };
    case "undefined":
      throw invalid(path, "undefined is not a state dict value; delete the key or use null");
    case "function":
      throw invalid(path, "a function is not a state dict value; remove it, or wrap the object in a Stateful");
    case "symbol":
      throw invalid(path, "a symbol is not a state dict value");
    case "bigint":
      throw invalid(path, "a bigint is not a state dict value; use an int64 host tensor or a string");
  }
  if (value === null) return { kind: "value", path, value: null };
  const object = value as Record<string, unknown>;
  if (value instanceof Uint8Array) {
    return { kind: "bytes", path, data: value };
  }
  if (ArrayBuffer.isView(value)) {
    throw invalid(
      path,
      `a bare ${value.constructor.name} has no shape or dtype; wrap it with hostTensor(dtype, shape, data)`,
    );
  }
  if (isTensorLike(value)) {
    if (value.isDisposed === true) throw invalid(path, "the tfjs tensor is already disposed; pass a live tensor");
    const dtype = tfjsDType(value, path);
    const shape = shapeOf(value.shape, path);
    return { kind: "tensor", path, dtype, shape, source: { kind: "tfjs", tensor: value } };
  }
  if (looksLikeHostTensor(object)) {
    const { dtype, data } = object;
    if (!isDType(dtype)) throw unsupportedDType(dtype, whereKey(path));
    const shape = shapeOf(object.shape, path);
    // Checked here and only described by `checkHostData` when wrong: a closure per tensor for the message is garbage.
    if (!matchesArrayType(dtype, data) || data.length !== numel(shape))
      checkHostData(dtype, shape, data, whereKey(path));
    const tensor = { dtype, shape, data } as HostTensor;
    return { kind: "tensor", path, dtype, shape, source: { kind: "host", tensor } };
  }
  if (isShardedTensor(value)) return { type: "sharded", leaves: shardLeaves(value, path), sharded: value };
  if (isStateful(value)) return { type: "stateful", object: value };
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++)
      if (!(i in value)) throw invalid([...path, i], "arrays must not have holes; use null");
    return ARRAY;
  }
  if (isPlainObject(object)) {
    if (Object.getOwnPropertySymbols(object).length > 0)
      throw invalid(path, "symbol keys cannot be checkpointed; use string keys");
    return OBJECT;
  }
  const name =
    (Object.getPrototypeOf(object) as { constructor?: { name?: string } } | null)?.constructor?.name ?? "object";
  throw invalid(
    path,
    `a ${name} instance is not a state dict value; convert it to plain data, or give it stateDict() and loadStateDict() (Stateful)`,
  );
}

/** One tensor leaf per shard, each checked like any tensor and against the sharded tensor's dtype. */
function shardLeaves(sharded: ShardedTensor, path: KeyPath): Leaf[] {
  const boxes = shardBoxes(sharded, `state dict key ${displayKey(path)}`);
  const globalShape = validateShape(sharded.shape, () => `state dict key ${displayKey(path)}`);
  return sharded.shards.map((shard, i) => {
    const leaf = classify(shard.tensor, path);
    if (!isLeaf(leaf) || leaf.kind !== "tensor") {
      throw invalid(path, `shard ${i} must hold a host tensor or a tfjs tensor`);
    }
    if (leaf.dtype !== sharded.dtype)
      throw invalid(path, `shard ${i} is ${leaf.dtype} but the sharded tensor is ${sharded.dtype}`);
    return { ...leaf, shard: { globalShape, offsets: boxes[i]!.offsets } };
  });
}

/** A `Stateful` met while flattening a load target: after its leaves are filled, `loadStateDict(target)` is called. */
export interface StatefulTarget {
  readonly path: KeyPath;
  readonly object: Stateful;
  readonly target: StateDict;
}

/** A leaf of a load target, with a way to put a replacement value where it was found. */
export interface TargetLeaf {
  readonly leaf: Leaf;
  readonly replace: (value: StateValue) => void;
}

export interface FlattenedTarget {
  readonly leaves: readonly TargetLeaf[];
  /** Statefuls in post-order (inner before outer), so each sees its children already loaded. */
  readonly statefuls: readonly StatefulTarget[];
}

/**
 * Walks a state dict depth-first, expanding `Stateful`s, and rejects anything that cannot be
 * saved. Runs to completion before any byte is written, so bad input writes nothing. Synchronous
 * until a `Stateful` is met, so a large plain state dict costs no promise per value.
 */
async function walk(
  root: StateDict,
  onLeaf: (leaf: Leaf, replace: (value: StateValue) => void) => void,
  onStateful: (target: StatefulTarget) => void,
  replaceable: boolean,
): Promise<void> {
  if (!isObject(root) || Array.isArray(root) || ArrayBuffer.isView(root) || isTensorLike(root)) {
    throw new CheckpointError(
      "invalid_argument",
      `a state dict must be a plain object of named values, not ${describeValue(root)}`,
    );
  }
  const ancestors = new Ancestors();
  /** The number of values visited below the root so far, in walk order: where `childPath` looks for a path to reuse. */
  let node = 0;
  // No function below that runs per value captures its own parameters or locals in a closure:
  // V8 would then allocate a context for every call (or every loop turn), whether the closure is
  // made or not. The closures are made by the helpers at the end of this file.
  /** Where a leaf found in `parent` under `key` gets its replacement; made only for leaves (a closure per container costs garbage). */
  const replacer = (parent: Record<string | number, StateValue> | undefined, key: string | number) =>
    !replaceable ? noReplace : parent ? replacerIn(parent, key) : noRootReplace;
  const visit = (
    value: unknown,
    path: KeyPath,
    parent: Record<string | number, StateValue> | undefined,
    key: string | number,
  ): Promise<void> | undefined => {
    const classified = classify(value, path);
    if (isLeaf(classified)) {
      onLeaf(classified, replacer(parent, key));
      return undefined;
    }
    if (classified.type === "sharded") {
      const { shards } = classified.sharded;
      classified.leaves.forEach((leaf, i) => onLeaf(leaf, shardReplacer(shards, i)));
      return undefined;
    }
    const object = value as object;
    if (path.length >= MAX_STATE_DEPTH)
      throw new CheckpointError(
        "invalid_argument",
        `state dict key ${displayKey(path.slice(0, 8))}…: the state dict nests containers deeper than ${MAX_STATE_DEPTH} levels`,
        { context: { key: displayKey(path.slice(0, 8)) } },
      );
    if (ancestors.has(object)) throw invalid(path, "the state dict contains a cycle; a value must not contain itself");
    ancestors.add(object);
    if (classified.type === "stateful") return visitStateful(classified.object, object, path);
    // An array's indices are not listed (`undefined`), an object's keys are.
    const keys = classified.type === "object" ? Object.keys(object) : undefined;
    if ((keys ?? (object as unknown[])).length === 0) {
      onLeaf({ kind: "value", path, value: keys ? {} : [] }, replacer(parent, key));
      ancestors.delete(object);
      return undefined;
    }
    const pending = visitContainer(object, keys, path, 0);
    if (pending) return thenLeave(pending, ancestors, object);
    ancestors.delete(object);
    return undefined;
  };
  const visitStateful = async (stateful: Stateful, object: object, path: KeyPath): Promise<void> => {
    const inner = await stateful.stateDict();
    if (!isObject(inner) || Array.isArray(inner) || !isPlainObject(inner as Record<string, unknown>)) {
      throw invalid(path, "stateDict() must return a plain object");
    }
    ancestors.add(inner);
    await visitContainer(inner, Object.keys(inner), path, 0);
    ancestors.delete(inner);
    onStateful({ path, object: stateful, target: inner });
    ancestors.delete(object);
  };
  /** Visits children from index `from` on; once a child turns asynchronous (a Stateful), the rest follow it. */
  const visitContainer = (
    container: object,
    keys: readonly string[] | undefined,
    path: KeyPath,
    from: number,
  ): Promise<void> | undefined => {
    const record = container as Record<string | number, StateValue>;
    const count = keys ? keys.length : (container as unknown[]).length;
    for (let i = from; i < count; i++) {
      const key = keys ? keys[i]! : i;
      if (isForbiddenKey(key)) {
        throw invalid(
          [...path, key],
          `the key ${JSON.stringify(key)} is not allowed (loaded into an object it would reach Object.prototype); rename it`,
        );
      }
      const pending = visit(record[key], childPath(path, key, node++), record, key);
      if (pending) return visitRestAfter(pending, container, keys, path, i + 1);
    }
    return undefined;
  };
  /** The rest of a container's children, once `pending` (a child's Stateful) is done. */
  const visitRestAfter = (
    pending: Promise<void>,
    container: object,
    keys: readonly string[] | undefined,
    path: KeyPath,
    from: number,
  ): Promise<void> => pending.then(() => visitContainer(container, keys, path, from));
  if (Object.keys(root).length === 0 && !isStateful(root)) return;
  await visit(root, ROOT_PATH, undefined, "");
  // What a smaller state dict walked last no longer reaches is let go.
  if (node < pathsMade.length) {
    pathsMade.length = node;
    parentsMade.length = node;
  }
}

/** Puts a replacement under `key` in `parent`. */
function replacerIn(parent: Record<string | number, StateValue>, key: string | number): (value: StateValue) => void {
  return (replacement) => void (parent[key] = replacement);
}

/** Puts a replacement in shard `i` of `shards`. */
function shardReplacer(shards: ShardedTensor["shards"], i: number): (value: StateValue) => void {
  return (replacement) => {
    shards[i] = { offsets: shards[i]!.offsets, tensor: replacement as TensorLike };
  };
}

/** `pending`, then `object` leaves the ancestors. */
function thenLeave(pending: Promise<void>, ancestors: Ancestors, object: object): Promise<void> {
  return pending.then(() => void ancestors.delete(object));
}

function noRootReplace(): void {
  throw new CheckpointError("invalid_argument", "the state dict's root cannot be replaced");
}

/** The root's path: a constant, so that paths below it are found again walk after walk (`childPath`). */
const ROOT_PATH: KeyPath = Object.freeze([]);
/**
 * The path of every value the last walks visited, by position in walk order, and the parent
 * path each was made from. A training loop saves (and loads) the same structure again and
 * again: its paths were three arrays a tensor, made anew each walk and kept until the save's
 * end. Frozen, so nobody can change one that is handed out again.
 */
const pathsMade: KeyPath[] = [];
const parentsMade: KeyPath[] = [];

/**
 * `path` and then `key`: the frozen array made for the value at walk position `node` last
 * time, if it was made from this very `path` array (frozen, so the same contents) with this
 * key; else a new frozen array of exactly that length (a spread leaves spare capacity, three
 * times the memory, and `concat` costs about ten times this copy), kept for the next walk.
 * Walks that interleave (Statefuls that answer later) only find fewer paths to reuse.
 */
function childPath(path: KeyPath, key: string | number, node: number): KeyPath {
  const made = pathsMade[node];
  if (made !== undefined && parentsMade[node] === path && made[made.length - 1] === key) return made;
  const child = new Array<string | number>(path.length + 1);
  for (let i = 0; i < path.length; i++) child[i] = path[i]!;
  child[path.length] = key;
  Object.freeze(child);
  if (node <= pathsMade.length) {
    pathsMade[node] = child;
    parentsMade[node] = path;
  }
  return child;
}

/**
 * The containers on the path being walked, for finding cycles: a stack searched from the top,
 * as a state dict is shallow (a Set costs about 120 B of hash table churn per container), and a
 * Set as well once it is deep, so that a deep one is not searched in quadratic time.
 */
class Ancestors {
  readonly #stack: object[] = [];
  #set: Set<object> | undefined;

  has(object: object): boolean {
    return this.#set ? this.#set.has(object) : this.#stack.includes(object);
  }

  add(object: object): void {
    this.#stack.push(object);
    if (this.#set) this.#set.add(object);
    else if (this.#stack.length > 64) this.#set = new Set(this.#stack);
  }

  delete(object: object): void {
    const stack = this.#stack;
    if (stack[stack.length - 1] === object) stack.pop();
    else {
      const at = stack.lastIndexOf(object);
      if (at >= 0) stack.splice(at, 1);
    }
    this.#set?.delete(object);
    if (this.#set && stack.length <= 32) this.#set = undefined;
  }
}

/** What a save's leaves get as `replace`: a save never replaces a value. */
function noReplace(): void {
  throw new CheckpointError("invalid_argument", "a saved state dict's values are not replaced");
}

/** The leaves to save, in a deterministic order (depth-first, keys in insertion order). */
export async function flattenStateDict(stateDict: StateDict): Promise<Leaf[]> {
  const leaves: Leaf[] = [];
  await walk(
    stateDict,
    (leaf) => leaves.push(leaf),
    () => undefined,
    false,
  );
  return leaves;
}

/** The leaves a load fills, each with where to put a replacement, and the Statefuls to call back. */
export async function flattenTarget(stateDict: StateDict): Promise<FlattenedTarget> {
  const leaves: TargetLeaf[] = [];
  const statefuls: StatefulTarget[] = [];
  await walk(
    stateDict,
    (leaf, replace) => leaves.push({ leaf, replace }),
    (s) => statefuls.push(s),
    true,
  );
  return { leaves, statefuls };
}
