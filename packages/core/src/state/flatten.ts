import { isDType, unsupportedDType, validateShape } from "./dtypes.js";
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

type Classified =
  | { readonly type: "leaf"; readonly leaf: Leaf }
  | { readonly type: "stateful"; readonly object: Stateful }
  | { readonly type: "sharded"; readonly leaves: readonly Leaf[]; readonly sharded: ShardedTensor }
  | { readonly type: "container"; readonly keys: readonly string[] | undefined };

/** A container's keys: an array's indices are not listed (`undefined`), an object's are. */
const ARRAY: Classified = { type: "container", keys: undefined };

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

function classify(value: unknown, path: KeyPath): Classified {
  switch (typeof value) {
    case "string":
    case "boolean":
    case "number":
      return { type: "leaf", leaf: { kind: "value", path, value } };
    case "undefined":
      throw invalid(path, "undefined is not a state dict value; delete the key or use null");
    case "function":
      throw invalid(path, "a function is not a state dict value; remove it, or wrap the object in a Stateful");
    case "symbol":
      throw invalid(path, "a symbol is not a state dict value");
    case "bigint":
      throw invalid(path, "a bigint is not a state dict value; use an int64 host tensor or a string");
  }
  if (value === null) return { type: "leaf", leaf: { kind: "value", path, value: null } };
  const object = value as Record<string, unknown>;
  if (value instanceof Uint8Array) {
    return { type: "leaf", leaf: { kind: "bytes", path, data: value } };
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
    const shape = validateShape(value.shape, whereKey(path));
    return { type: "leaf", leaf: { kind: "tensor", path, dtype, shape, source: { kind: "tfjs", tensor: value } } };
  }
  if (looksLikeHostTensor(object)) {
    const where = whereKey(path);
    if (!isDType(object.dtype)) throw unsupportedDType(object.dtype, where);
    const shape = validateShape(object.shape, where);
    checkHostData(object.dtype, shape, object.data, where);
    const tensor = { dtype: object.dtype, shape, data: object.data } as HostTensor;
    return {
      type: "leaf",
      leaf: { kind: "tensor", path, dtype: object.dtype, shape, source: { kind: "host", tensor } },
    };
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
    return { type: "container", keys: Object.keys(object) };
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
    const classified = classify(shard.tensor, path);
    if (classified.type !== "leaf" || classified.leaf.kind !== "tensor") {
      throw invalid(path, `shard ${i} must hold a host tensor or a tfjs tensor`);
    }
    const leaf = classified.leaf;
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
  /** Where a leaf found in `parent` under `key` gets its replacement; made only for leaves (a closure per container costs garbage). */
  const replacer = (parent: Record<string | number, StateValue> | undefined, key: string | number) =>
    !replaceable
      ? noReplace
      : parent
        ? (replacement: StateValue): void => void (parent[key] = replacement)
        : noRootReplace;
  const visit = (
    value: unknown,
    path: KeyPath,
    parent: Record<string | number, StateValue> | undefined,
    key: string | number,
  ): Promise<void> | undefined => {
    const classified = classify(value, path);
    if (classified.type === "leaf") {
      onLeaf(classified.leaf, replacer(parent, key));
      return undefined;
    }
    if (classified.type === "sharded") {
      const { shards } = classified.sharded;
      classified.leaves.forEach((leaf, i) => {
        onLeaf(leaf, (replacement) => {
          shards[i] = { offsets: shards[i]!.offsets, tensor: replacement as TensorLike };
        });
      });
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
    const { keys } = classified;
    if ((keys ?? (object as unknown[])).length === 0) {
      onLeaf({ kind: "value", path, value: keys ? {} : [] }, replacer(parent, key));
      ancestors.delete(object);
      return undefined;
    }
    const pending = visitContainer(object, keys, path, 0);
    if (pending) return pending.then(() => void ancestors.delete(object));
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
      const pending = visit(record[key], childPath(path, key), record, key);
      if (pending) return pending.then(() => visitContainer(container, keys, path, i + 1));
    }
    return undefined;
  };
  if (Object.keys(root).length === 0 && !isStateful(root)) return;
  await visit(root, [], undefined, "");
}

function noRootReplace(): void {
  throw new CheckpointError("invalid_argument", "the state dict's root cannot be replaced");
}

/**
 * `path` and then `key`, in an array of exactly that length: a spread leaves spare capacity (three
 * times the memory, per leaf), and `concat` costs about ten times this copy.
 */
function childPath(path: KeyPath, key: string | number): KeyPath {
  const child = new Array<string | number>(path.length + 1);
  for (let i = 0; i < path.length; i++) child[i] = path[i]!;
  child[path.length] = key;
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
