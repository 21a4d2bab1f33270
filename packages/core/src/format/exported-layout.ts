import { CheckpointError } from "../errors.js";
import type { KeyPath } from "../state/state-dict.js";
import type { ValueEntry } from "./metadata.js";
import { checkKeyPath, forbiddenKeyReason, parseStoredJson } from "./stored-keys.js";

/** The `__metadata__` field of a file `cairn export` wrote that lets import rebuild the checkpoint exactly: key paths, kinds, values, user metadata. */
export const CAIRN_METADATA_KEY = "cairn";

/** What `__metadata__.cairn` holds (a JSON string, as safetensors metadata values are strings). */
export interface ExportedLayout {
  readonly version: 1;
  readonly entries: readonly (
    { readonly name: string; readonly key: KeyPath; readonly kind: "tensor" | "bytes" } | ValueEntry
  )[];
  readonly user: Readonly<Record<string, unknown>>;
}

/**
 * Parses `__metadata__.cairn` of a safetensors file holding the tensors `names`, read from
 * storage and so hostile: JSON without keys that reach a prototype, key paths that are arrays
 * of names and indices, and every tensor of the file claimed exactly once. Throws `corrupt`
 * naming `where`.
 */
export function parseExportedLayout(raw: string, names: ReadonlySet<string>, where: string): ExportedLayout {
  const invalid = (problem: string): CheckpointError =>
    new CheckpointError(
      "corrupt",
      `${where} is not a valid safetensors file: __metadata__.${CAIRN_METADATA_KEY} ${problem}`,
      { context: { path: where } },
    );
  let layout: ExportedLayout;
  try {
    layout = parseStoredJson(raw, (key) =>
      invalid(`holds the key ${JSON.stringify(key)}: ${forbiddenKeyReason(key)}`),
    ) as ExportedLayout;
  } catch (error) {
    if (error instanceof CheckpointError) throw error;
    throw invalid("is not JSON");
  }
  if (layout?.version !== 1 || !Array.isArray(layout.entries))
    throw invalid("is not a Cairn export layout of version 1");
  const claimed = new Set<string>();
  for (const entry of layout.entries) {
    if (
      !Array.isArray(entry?.key) ||
      !entry.key.every((k: unknown) => typeof k === "string" || (Number.isSafeInteger(k) && (k as number) >= 0))
    )
      throw invalid("has an entry without a key path");
    checkKeyPath(
      entry.key,
      where,
      "corrupt",
      `__metadata__.${CAIRN_METADATA_KEY} names the key path ${JSON.stringify(entry.key)}`,
    );
    if (entry.kind === "value") continue;
    if ((entry.kind !== "tensor" && entry.kind !== "bytes") || !names.has(entry.name) || claimed.has(entry.name)) {
      throw invalid(`names tensor ${JSON.stringify(entry.name)}, which the file does not hold once`);
    }
    claimed.add(entry.name);
  }
  if (claimed.size !== names.size) throw invalid("does not account for every tensor of the file");
  return layout;
}
