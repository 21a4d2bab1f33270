/**
 * The mark of mark-and-sweep deletion under a root of steps: how many committed steps use each
 * file of another step (incremental saves reference their base's files, format 2.1). Kept up to
 * date as steps are read, saved or forgotten, so a deletion never re-reads every step's metadata.
 * Paths are relative to the root (`<step>/<file>`).
 */
export class StepFiles {
  readonly #uses = new Map<string, number>();
  readonly #of = new Map<number, readonly string[]>();
  /** Committed steps of a newer format: they may use any file, so no data file is deleted while one is committed. */
  readonly #newer = new Set<number>();

  /** `step` is committed and uses these files of other steps (none for a full save). */
  set(step: number, referenced: readonly string[]): void {
    this.forget(step);
    if (referenced.length === 0) return;
    this.#of.set(step, referenced);
    for (const path of referenced) this.#uses.set(path, (this.#uses.get(path) ?? 0) + 1);
  }

  /** `step` is committed in a format this Cairn cannot read: what it uses is unknown. */
  setUnknown(step: number): void {
    this.forget(step);
    this.#newer.add(step);
  }

  /** `step` is no longer committed. */
  forget(step: number): void {
    this.#newer.delete(step);
    const referenced = this.#of.get(step);
    if (!referenced) return;
    this.#of.delete(step);
    for (const path of referenced) {
      const left = this.#uses.get(path)! - 1;
      if (left > 0) this.#uses.set(path, left);
      else this.#uses.delete(path);
    }
  }

  /** The files of other steps `step` uses. */
  referencedBy(step: number): readonly string[] {
    return this.#of.get(step) ?? [];
  }

  /** Steps known to this mark (to drop those no longer listed). */
  steps(): number[] {
    return [...this.#of.keys(), ...this.#newer];
  }

  /** Whether a committed step other than its owner uses the file at `path`. */
  isShared(path: string): boolean {
    return this.#uses.has(path);
  }

  /** Whether deleters must keep every data file: a committed step of a newer format may use any. */
  get unknown(): boolean {
    return this.#newer.size > 0;
  }

  /** The paths of `paths` a deletion may remove: none while `unknown`, else those no committed step uses (metadata.json always). */
  sweepable(paths: readonly string[]): string[] {
    return paths.filter((path) => path.endsWith("/metadata.json") || (!this.unknown && !this.isShared(path)));
  }
}
