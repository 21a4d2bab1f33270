import { CheckpointError } from "../errors.js";
import type { CheckpointMetadata, EntryMetadata } from "../format/metadata.js";
import { type KeyPath, displayKey, pathId } from "../state/state-dict.js";

/** How many names an error suggests when a key matches nothing. */
const SUGGESTIONS = 8;

function startsWith(key: KeyPath, prefix: readonly string[]): boolean {
  return prefix.length <= key.length && prefix.every((segment, i) => String(key[i]) === segment);
}

/**
 * The entries a command asks for by name, in checkpoint order: a name is an entry's dotted key
 * (`model.dense.kernel`) or a whole-segment prefix of it (`model`, `model.dense`), and a key
 * path array picks exactly one entry. No names: every entry. A name that matches nothing is
 * `not_found`, naming entries that start like it. Used by `cairn stats` and the UI's server.
 */
export function selectEntries(
  metadata: CheckpointMetadata,
  names: readonly (string | KeyPath)[] = [],
): EntryMetadata[] {
  if (names.length === 0) return [...metadata.entries];
  const picked = new Set<EntryMetadata>();
  for (const name of names) {
    const matches =
      typeof name === "string"
        ? metadata.entries.filter((e) => displayKey(e.key) === name || startsWith(e.key, name.split(".")))
        : metadata.entries.filter((e) => pathId(e.key) === pathId(name));
    if (matches.length === 0) {
      const shown = typeof name === "string" ? name : displayKey(name);
      const head = shown.split(".")[0] ?? "";
      const near = metadata.entries.map((e) => displayKey(e.key)).filter((k) => k.startsWith(head));
      const list = (near.length > 0 ? near : metadata.entries.map((e) => displayKey(e.key))).slice(0, SUGGESTIONS);
      throw new CheckpointError(
        "not_found",
        `no entry ${JSON.stringify(shown)} in the checkpoint; entries there: ${list.join(", ")}${metadata.entries.length > list.length ? ", …" : ""}`,
        { context: { key: shown } },
      );
    }
    for (const match of matches) picked.add(match);
  }
  return metadata.entries.filter((e) => picked.has(e));
}
