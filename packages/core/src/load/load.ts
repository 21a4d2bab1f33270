import type { Box } from "../state/box.js";
import {
  type CheckpointOptions,
  checkOption,
  checkpointOptionsOf,
  hasMembers,
  isPositiveInteger,
  openCheckpoint,
  SAFETENSORS_URL_PREFIX,
} from "../storage/checkpoint-location.js";
import { DefaultLoadPlanner } from "../plan/default-load-planner.js";
import { type DType, allocate, bytesOf, itemSize, numel } from "../state/dtypes.js";
import { CheckpointError, describeValue, throwIfAborted } from "../errors.js";
import { readRanges } from "./read-ranges.js";
import { type FlattenedTarget, flattenTarget } from "../state/flatten.js";
import { type Leaf, leafBox, tfjsDType } from "../state/leaf.js";
import type { LoadPlanner, LoadRequest } from "../plan/load-planner.js";
import { type CheckpointMetadata, type EntryMetadata, METADATA_FILE, valueOf } from "../format/metadata.js";
import { ObjectReaders } from "../storage/object-readers.js";
import { dataFilePath } from "../format/naming.js";
import {
  type KeyPath,
  type StateDict,
  type StateValue,
  displayKey,
  isForbiddenKey,
  pathId,
} from "../state/state-dict.js";
import { type HostTensor, type VariableLike } from "../state/tensors.js";
import { cancelledOr, readCheckpointMetadata } from "./read-metadata.js";
import { type TfjsModule, tfjsModule } from "./tfjs.js";

/** On remote storage, a gap up to this size between two needed ranges costs less to read than one more request. */
const REMOTE_GAP_BYTES = 1 << 20;

export interface LoadOptions extends CheckpointOptions {
  readonly planner?: LoadPlanner;
  /** Load what the checkpoint has and leave the rest of the target as it is (DCP's allow_partial_load). */
  readonly partial?: boolean;
  /** Range reads in flight at once (default 8). */
  readonly concurrency?: number;
  /** Largest single range read; bigger chunks are read in pieces (default 8 MiB). */
  readonly maxReadBytes?: number;
  /** Bound on bytes held by reads in flight (default 64 MiB: 8 reads of 8 MiB). */
  readonly maxInflightBytes?: number;
  /** The tfjs module to make tensors with; by default `@tensorflow/tfjs-core` is imported. */
  readonly tf?: TfjsModule;
  /**
   * The checkpoint's metadata, when the caller has it already (another rank sent it, a
   * `readMetadata` before): `metadata.json` is then not read. Bytes of a `metadata.json` or a
   * `CheckpointMetadata`; either is checked exactly as a read one would be (`corrupt`,
   * `unsupported_version`), and the data files are read from the location as named there.
   */
  readonly metadata?: Uint8Array | CheckpointMetadata;
}

export interface LoadResult {
  readonly checkpoint: string;
  /** Bytes read from storage, headers and metadata included. */
  readonly bytesRead: number;
  /** Data files read from. */
  readonly files: number;
  /** Leaves filled. */
  readonly entries: number;
  /** Leaves the target asked for that the checkpoint lacks (only with `partial`). */
  readonly missing: readonly string[];
  readonly seconds: number;
  /**
   * The checkpoint's metadata. A chunk's checksums are decoded when its `crc32c` is first read
   * (`ParseOptions.lazyChecksums`: the load decoded only those it checked); a forged string of them throws `corrupt` then.
   */
  readonly metadata: CheckpointMetadata;
}

/**
 * Loads a checkpoint, like `torch.distributed.checkpoint.load`.
 *
 * With a target state dict, loads in place, driven by the target: host tensors are filled,
 * tfjs variables assigned, immutable tfjs tensors, blobs and values replaced in their parent
 * (the replaced tensors are not disposed: the caller owns them), and `Stateful`s get
 * `loadStateDict` after their leaves are filled. Every block a read touches is checked
 * against its CRC32C; on network storage (`remote`) a read that fails its check is read once
 * more before the file is reported damaged. If a load fails midway, host tensors of the target
 * may be partly filled.
 *
 * Without a target, resolves the whole state dict as host tensors and values.
 *
 * `hf+<url>` loads from a Hugging Face safetensors layout without importing it (see
 * `readSafetensorsLayout`): tensors keyed by their names split at dots, only the ranges a target
 * needs read. Its files carry no checksums: their headers and sizes are checked, not their data.
 *
 * Throws `not_found`, `not_committed`, `unsupported_version`, `mismatch` (a key missing or of
 * another dtype or shape), `corrupt` (checksum, truncation, malformed metadata), `cancelled`, `storage`.
 */
export function load(stateDict: StateDict, checkpointIdOrOptions: string | LoadOptions): Promise<LoadResult>;
export function load(checkpointIdOrOptions: string | LoadOptions): Promise<StateDict>;
export async function load(
  first: StateDict | string | LoadOptions,
  second?: string | LoadOptions,
): Promise<LoadResult | StateDict> {
  if (second === undefined) {
    const root: StateDict = {};
    await loadInto(undefined, loadOptionsOf(first as string | LoadOptions), root);
    return root;
  }
  if (typeof first !== "object" || first === null || Array.isArray(first)) {
    throw new CheckpointError(
      "invalid_argument",
      `load: the target must be a state dict (a plain object of named values), not ${describeValue(first)}; call load(checkpoint) to load without a target`,
    );
  }
  return loadInto(first as StateDict, loadOptionsOf(second));
}

function loadOptionsOf(idOrOptions: string | LoadOptions): LoadOptions {
  const options = checkpointOptionsOf(idOrOptions, "load");
  const prefix = "load: option ";
  checkOption(options, "planner", hasMembers(["createLoadPlan"]), "a LoadPlanner (with createLoadPlan)", prefix);
  checkOption(options, "partial", (v) => typeof v === "boolean", "true or false", prefix);
  for (const name of ["concurrency", "maxReadBytes", "maxInflightBytes"])
    checkOption(options, name, isPositiveInteger, "a positive whole number", prefix);
  checkOption(options, "tf", hasMembers(["tensor"]), "the tfjs module (with tensor())", prefix);
  checkOption(
    options,
    "metadata",
    (v) => v instanceof Uint8Array || (typeof v === "object" && v !== null && !Array.isArray(v)),
    "the bytes of a metadata.json or a CheckpointMetadata",
    prefix,
  );
  if (options.metadata !== undefined && options.checkpointId?.startsWith(SAFETENSORS_URL_PREFIX)) {
    throw new CheckpointError(
      "invalid_argument",
      `load: option metadata is a Cairn checkpoint's, and ${options.checkpointId} is a Hugging Face layout; drop one of them`,
    );
  }
  return options;
}

/** A destination for requested bytes: a host buffer laid out as `box`, finished once all reads land. */
interface Destination {
  readonly request: LoadRequest;
  readonly box: Box;
  readonly buffer: Uint8Array;
  readonly finish: () => void;
}

async function loadInto(target: StateDict | undefined, options: LoadOptions, root?: StateDict): Promise<LoadResult> {
  const started = performance.now();
  const flattened = target ? await flattenTarget(target) : undefined;
  const location = await openCheckpoint(options);
  let readers: ObjectReaders | undefined;
  try {
    throwIfAborted(options.signal, "the load", null);
    const { metadata, bytes: metadataBytes, dir, checksums } = await readCheckpointMetadata(location, options, true);
    const opened = new ObjectReaders(location.storage, dir, {
      retry: options.retry,
      signal: options.signal,
      pathOf: (name) => dataFilePath(dir, name, metadata.files[name]),
    });
    readers = opened;
    const tf = flattened?.leaves.some((l) => l.leaf.kind === "tensor" && l.leaf.source.kind === "tfjs")
      ? await tfjsModule(options.tf)
      : undefined;
    const destinations = flattened ? targetDestinations(flattened, metadata, tf) : wholeCheckpoint(metadata, root!);
    const planner = options.planner ?? new DefaultLoadPlanner();
    const plan = planner.createLoadPlan(
      metadata,
      destinations.map((d) => d.request),
      { partial: options.partial ?? false },
    );
    let bytes = 0;
    const read = await readRanges(
      metadata,
      plan.items,
      destinations.map((d) => ({
        key: d.request.key,
        box: d.box,
        buffer: d.buffer,
        itemSize: itemSize(d.request.dtype ?? "uint8"),
      })),
      async (file, offset, length, buffers = {}) => {
        const data = await opened.read(file, offset, length, buffers);
        bytes += data.byteLength + (buffers.head && data.byteLength > 0 ? buffers.head.byteLength : 0);
        return data;
      },
      {
        headerInFirstRange: location.storage.remote === true,
        rereadDamaged: location.storage.remote === true,
        coalesceGapBytes: location.storage.remote === true ? REMOTE_GAP_BYTES : 0,
        sizeOf: (file) => opened.size(file),
        readScattered: async (file, offset, parts) => {
          const got = await opened.readScattered(file, offset, parts);
          bytes += got ?? 0;
          return got;
        },
        concurrency: options.concurrency ?? 8,
        maxReadBytes: options.maxReadBytes ?? 8 << 20,
        maxInflightBytes: options.maxInflightBytes ?? 64 << 20,
        verifyBlocks: checksums,
        ...(options.signal ? { signal: options.signal } : {}),
      },
    );
    const skipped = new Set(plan.missing);
    for (const [i, destination] of destinations.entries()) if (!skipped.has(i)) destination.finish();
    for (const stateful of flattened?.statefuls ?? []) await stateful.object.loadStateDict(stateful.target);
    return {
      checkpoint: location.where,
      bytesRead: bytes + metadataBytes,
      files: read.files,
      entries: destinations.length - skipped.size,
      missing: plan.missing.map((i) => displayKey(destinations[i]!.request.key)),
      seconds: (performance.now() - started) / 1000,
      metadata,
    };
  } catch (error) {
    throw cancelledOr(error, options.signal, "the load");
  } finally {
    await readers?.close();
    await location.release();
  }
}

function fullBox(shape: readonly number[]): Box {
  return { offsets: shape.map(() => 0), sizes: shape };
}

/** Where each leaf of a target state dict gets its bytes, and how it is put in place afterwards. */
function targetDestinations(
  flattened: FlattenedTarget,
  metadata: CheckpointMetadata,
  tf: TfjsModule | undefined,
): Destination[] {
  // Only values and blobs look their entry up here (the load planner matches tensors): no id per entry otherwise.
  let entries: Map<string, EntryMetadata> | undefined;
  const savedAt = (path: KeyPath): EntryMetadata | undefined =>
    (entries ??= new Map(metadata.entries.map((e) => [pathId(e.key), e]))).get(pathId(path));
  return flattened.leaves.map(({ leaf, replace }): Destination => {
    const request = requestFor(leaf);
    if (leaf.kind === "value") {
      const saved = savedAt(leaf.path);
      const finish = (): void => {
        if (saved?.kind === "value") replace(valueOf(saved) as StateValue);
      };
      return { request, box: fullBox([]), buffer: new Uint8Array(0), finish };
    }
    if (leaf.kind === "bytes") {
      // A blob may change size between saves: it is replaced by one sized as the checkpoint's.
      const saved = savedAt(leaf.path);
      const data = new Uint8Array(saved?.kind === "bytes" ? saved.byteLength : 0);
      return { request, box: fullBox([data.byteLength]), buffer: data, finish: () => replace(data) };
    }
    const { source, dtype, shape } = leaf;
    // The request's box, made once from the leaf (`requestFor`).
    const box = request.box!;
    if (source.kind === "host") {
      return { request, box, buffer: bytesOf(source.tensor.data), finish: () => undefined };
    }
    const host = allocate(dtype, numel(shape));
    return {
      request,
      box,
      buffer: bytesOf(host),
      finish: () => {
        const fresh = tf!.tensor(host, [...shape], source.tensor.dtype);
        if (typeof (source.tensor as Partial<VariableLike>).assign === "function") {
          (source.tensor as VariableLike).assign(fresh);
          fresh.dispose();
        } else {
          replace(fresh);
        }
      },
    };
  });
}

function requestFor(leaf: Leaf): LoadRequest {
  if (leaf.kind === "value") return { key: leaf.path, kind: "value" };
  if (leaf.kind === "bytes") return { key: leaf.path, kind: "bytes" };
  const dtype: DType = leaf.source.kind === "tfjs" ? tfjsDType(leaf.source.tensor, leaf.path) : leaf.dtype;
  const { globalShape, box } = leafBox(leaf);
  return { key: leaf.path, kind: "tensor", dtype, shape: globalShape, box };
}

/** Destinations for every entry of a checkpoint, built into `root` as nested objects and arrays. */
function wholeCheckpoint(metadata: CheckpointMetadata, root: StateDict): Destination[] {
  const place = containerBuilder(root);
  return metadata.entries.map((entry): Destination => {
    // Everything is placed now, in the entries' order, so the rebuilt objects keep the saved key order.
    if (entry.kind === "value") {
      place(entry.key, valueOf(entry) as StateValue);
      return {
        request: { key: entry.key, kind: "value" },
        box: fullBox([]),
        buffer: new Uint8Array(0),
        finish: () => undefined,
      };
    }
    if (entry.kind === "bytes") {
      const data = new Uint8Array(entry.byteLength);
      place(entry.key, data);
      return {
        request: { key: entry.key, kind: "bytes" },
        box: fullBox([entry.byteLength]),
        buffer: data,
        finish: () => undefined,
      };
    }
    const data = allocate(entry.dtype, numel(entry.shape));
    const tensor: HostTensor = { dtype: entry.dtype, shape: [...entry.shape], data };
    place(entry.key, tensor);
    return {
      request: { key: entry.key, kind: "tensor", dtype: entry.dtype, shape: entry.shape, box: fullBox(entry.shape) },
      box: fullBox(entry.shape),
      buffer: bytesOf(data),
      finish: () => undefined,
    };
  });
}

/**
 * A guarded setter for the object a load without target returns. Stored key paths are hostile:
 * it descends only into containers it made itself (own properties, never inherited ones), never
 * assigns a key that reaches a prototype, and refuses paths that collide or leave array holes.
 */
function containerBuilder(root: StateDict): (path: KeyPath, value: StateValue) => void {
  const made = new WeakSet<object>([root]);
  return (path, value) => {
    const conflict = (problem: string): CheckpointError =>
      new CheckpointError(
        "corrupt",
        `${METADATA_FILE}: key ${displayKey(path)} ${problem}; the checkpoint cannot be read`,
        { context: { key: displayKey(path) } },
      );
    let node: Record<string | number, StateValue> | StateValue[] = root;
    for (let i = 0; i < path.length; i++) {
      const key = path[i]!;
      if (isForbiddenKey(key)) throw conflict(`holds ${JSON.stringify(key)}, which would reach Object.prototype`);
      if (Array.isArray(node) ? typeof key !== "number" || key > node.length : typeof key !== "string") {
        throw conflict(
          "does not fit the containers its other entries make (an index into an object, a name into an array, or an array hole)",
        );
      }
      const exists = Object.hasOwn(node, key);
      if (i === path.length - 1) {
        if (exists) throw conflict("is stored twice, or is both a value and a container");
        (node as Record<string | number, StateValue>)[key] = value;
        return;
      }
      if (exists) {
        const child = (node as Record<string | number, StateValue>)[key];
        if (typeof child !== "object" || child === null || !made.has(child))
          throw conflict("is both a value and a container");
        node = child as Record<string, StateValue>;
      } else {
        const child: Record<string, StateValue> | StateValue[] = typeof path[i + 1] === "number" ? [] : {};
        made.add(child);
        (node as Record<string | number, StateValue>)[key] = child as StateValue;
        node = child;
      }
    }
  };
}
