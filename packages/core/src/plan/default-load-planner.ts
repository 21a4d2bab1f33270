import { type Box, intersectBoxes } from "../state/box.js";
import { numel } from "../state/dtypes.js";
import { CheckpointError } from "../errors.js";
import type { LoadPlan, LoadPlanner, LoadRequest, ReadItem } from "./load-planner.js";
import type { CheckpointMetadata, EntryMetadata } from "../format/metadata.js";
import { displayKey, pathId } from "../state/state-dict.js";

function describe(entry: EntryMetadata): string {
  if (entry.kind === "tensor") return `a ${entry.dtype} tensor of shape ${JSON.stringify(entry.shape)}`;
  if (entry.kind === "bytes") return `${entry.byteLength} bytes`;
  return "a value";
}

function sameNumbers(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function mismatch(request: LoadRequest, message: string): CheckpointError {
  return new CheckpointError("mismatch", `key ${displayKey(request.key)}: ${message}`, {
    context: { key: displayKey(request.key) },
  });
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
    const entries = new Map(metadata.entries.map((e) => [pathId(e.key), e]));
    const items: ReadItem[] = [];
    const missing: number[] = [];
    requests.forEach((request, index) => {
      const entry = entries.get(pathId(request.key));
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
        const region = intersectBoxes(chunk, box);
        if (!region) continue;
        covered += numel(region.sizes);
        if (numel(region.sizes) > 0) items.push({ request: index, chunk, region });
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
