import { type Box, intersectBoxes } from "../state/box.js";
import { numel } from "../state/dtypes.js";
import { CheckpointError } from "../errors.js";
import type { LoadPlan, LoadPlanner, LoadRequest, ReadItem } from "./load-planner.js";
import type { CheckpointMetadata, EntryMetadata } from "../format/metadata.js";
import { type KeyPath, displayKey, pathId } from "../state/state-dict.js";

function describe(entry: EntryMetadata): string {
  if (entry.kind === "tensor") return `a ${entry.dtype} tensor of shape ${JSON.stringify(entry.shape)}`;
  if (entry.kind === "bytes") return `${entry.byteLength} bytes`;
  return "a value";
}

function sameNumbers(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Whether `box` is exactly a chunk's: it is then the overlap itself, with no new box made (one per tensor). */
function isWholeOf(box: Box, chunk: Box): boolean {
  return sameNumbers(box.sizes, chunk.sizes) && sameNumbers(box.offsets, chunk.offsets);
}

function mismatch(request: LoadRequest, message: string): CheckpointError {
  return new CheckpointError("mismatch", `key ${displayKey(request.key)}: ${message}`, {
    context: { key: displayKey(request.key) },
  });
}

function sameKey(a: KeyPath, b: KeyPath): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * The entry each request (by index) names. A target shaped as the state that was saved asks for
 * exactly the checkpoint's entries in their order: then request i is entry i, with no key id
 * built or hashed for either (100k tensors: 200k strings and a map of them). Otherwise entries
 * are looked up by key id, the last of any entries with the same key winning.
 */
function entryLookup(
  entries: readonly EntryMetadata[],
  requests: readonly LoadRequest[],
): (request: number) => EntryMetadata | undefined {
  // Requests' keys are distinct (they are a state dict's leaves), so entries matching them one to one have no duplicates.
  if (entries.length === requests.length && requests.every((r, i) => sameKey(r.key, entries[i]!.key)))
    return (i) => entries[i];
  const byId = new Map<string, EntryMetadata>();
  for (const entry of entries) byId.set(pathId(entry.key), entry);
  return (i) => byId.get(pathId(requests[i]!.key));
}

/**
 * Matches each request to the entry with the same key path and reads the overlap of every
 * saved chunk with the requested box: any saved sharding loads into any requested one.
 */
export class DefaultLoadPlanner implements LoadPlanner {
  createLoadPlan(
    metadata: CheckpointMetadata,
    requests: readonly LoadRequest[],
    options: { readonly partial: boolean },
  ): LoadPlan {
    const entryFor = entryLookup(metadata.entries, requests);
    const items: ReadItem[] = [];
    const missing: number[] = [];
    requests.forEach((request, index) => {
      const entry = entryFor(index);
      if (!entry) {
        if (options.partial) {
          missing.push(index);
          return;
        }
        throw mismatch(
          request,
          `the target asks for it but the checkpoint does not have it; pass { partial: true } to load only what the checkpoint has`,
        );
      }
      if (entry.kind !== request.kind)
        throw mismatch(
          request,
          `the target holds ${request.kind === "value" ? "a value" : request.kind} but the checkpoint has ${describe(entry)}`,
        );
      if (entry.kind === "value") return;
      const shape = entry.kind === "tensor" ? entry.shape : [entry.byteLength];
      if (entry.kind === "tensor" && (request.dtype !== entry.dtype || !sameNumbers(request.shape ?? [], shape))) {
        throw mismatch(
          request,
          `the target is a ${request.dtype} tensor of shape ${JSON.stringify(request.shape)} but the checkpoint has ${describe(entry)}`,
        );
      }
      const box: Box = request.box ?? { offsets: shape.map(() => 0), sizes: shape };
      let covered = 0;
      for (const chunk of entry.chunks) {
        const region = isWholeOf(box, chunk) ? box : intersectBoxes(chunk, box);
        if (!region) continue;
        const elements = numel(region.sizes);
        covered += elements;
        if (elements > 0) items.push({ request: index, chunk, region });
      }
      if (covered < numel(box.sizes)) {
        throw new CheckpointError(
          "corrupt",
          `key ${displayKey(request.key)}: the saved chunks cover ${covered} of the ${numel(box.sizes)} elements asked for`,
          {
            context: { key: displayKey(request.key) },
          },
        );
      }
    });
    return { items, missing };
  }
}
