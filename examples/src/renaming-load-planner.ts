// A custom LoadPlanner: loads a checkpoint into a state dict whose keys were renamed since it
// was saved (say `model.encoder.*` became `backbone.*`). It rewrites the keys the target asks
// for, then lets the default planner match them, so resharding and checksums work as usual.
import {
  type CheckpointMetadata,
  DefaultLoadPlanner,
  type KeyPath,
  type LoadPlan,
  type LoadPlanner,
  type LoadRequest,
} from "@cairn/core";

export class RenamingLoadPlanner implements LoadPlanner {
  readonly #inner = new DefaultLoadPlanner();

  /** `renames`: a target key prefix (dotted) and the checkpoint prefix its leaves were saved under. */
  constructor(private readonly renames: Readonly<Record<string, string>>) {}

  createLoadPlan(
    metadata: CheckpointMetadata,
    requests: readonly LoadRequest[],
    options: { readonly partial: boolean },
  ): LoadPlan {
    return this.#inner.createLoadPlan(
      metadata,
      requests.map((r) => ({ ...r, key: this.#savedKey(r.key) })),
      options,
    );
  }

  #savedKey(key: KeyPath): KeyPath {
    for (const [from, to] of Object.entries(this.renames)) {
      const prefix = from.split(".");
      if (prefix.every((part, i) => String(key[i]) === part)) return [...to.split("."), ...key.slice(prefix.length)];
    }
    return key;
  }
}
