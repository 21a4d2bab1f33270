import type { LoadResult } from "@cairn/core";
import { sameCheckpoint } from "../tiers/copy-identity.js";
import type { Tier } from "../tiers/tier.js";

/**
 * Which steps this manager knows are good (it committed them, or loaded or verified them whole)
 * and which it found damaged, and the retention guard built on them: the newest step known good
 * and on the last tier is never deleted, from any tier, while a newer step is not both.
 */
export class VerifiedSteps {
  readonly #tiers: readonly Tier[];
  readonly #good = new Set<number>();
  readonly #durable = new Set<number>();
  /** Damaged steps, with what `restore("latest")` said of them (for the `corrupt` error listing each). */
  readonly #damaged = new Map<number, string>();
  /** The newest step known good and on the last tier. */
  #newestSafe: number | undefined;
  readonly #onDamaged: (step: number) => void;

  /** `onDamaged`: told of each step found damaged, which is verified nowhere from then on (health too). */
  constructor(tiers: readonly Tier[], onDamaged: (step: number) => void = () => undefined) {
    this.#tiers = tiers;
    this.#onDamaged = onDamaged;
  }

  /** A step this manager committed on tier 0 (its bytes checksummed as written), or read whole. */
  good(step: number): void {
    this.#good.add(step);
    this.#damaged.delete(step);
    if (this.#tiers.length === 1 || this.#onLastTier(step)) this.durable(step);
  }

  /**
   * A step restored into a target (`result`) or whole (undefined): good once every entry was read
   * (so checked); a partial load read only some of its bytes and vouches for nothing. Says which.
   */
  loaded(step: number, result: LoadResult | undefined): boolean {
    if (result !== undefined && result.entries < result.metadata.entries.length) return false;
    this.good(step);
    return true;
  }

  /** A step now committed on the last tier. */
  durable(step: number): void {
    this.#durable.add(step);
    if (this.#good.has(step) && (this.#newestSafe === undefined || step > this.#newestSafe)) this.#newestSafe = step;
  }

  /** A step whose every copy was found damaged: no longer good, so the retention guard moves back to the newest safe step before it. */
  damaged(step: number, why: string): void {
    this.#good.delete(step);
    this.#damaged.set(step, why);
    if (this.#newestSafe === step) this.#newestSafe = this.#safest();
    this.#onDamaged(step);
  }

  isGood(step: number): boolean {
    return this.#good.has(step);
  }

  /** What was found wrong with `step`, if it was found damaged. */
  damage(step: number): string | undefined {
    return this.#damaged.get(step);
  }

  /** A deleted step is forgotten, so a new save under its number starts afresh. */
  forget(step: number): void {
    this.#good.delete(step);
    this.#durable.delete(step);
    this.#damaged.delete(step);
    if (this.#newestSafe === step) this.#newestSafe = this.#safest();
  }

  /** The newest step both known good and durable. */
  #safest(): number | undefined {
    let newest: number | undefined;
    for (const step of this.#good)
      if (this.#durable.has(step) && (newest === undefined || step > newest)) newest = step;
    return newest;
  }

  /**
   * The retention guard: whether `step` is the newest known-good durable step while some newer
   * step on any tier is not yet known good and durable. Cheap unless `step` is that very step.
   */
  holds(step: number): boolean {
    if (step !== this.#newestSafe) return false;
    for (const tier of this.#tiers)
      for (const s of tier.opened?.knownSteps() ?? [])
        if (s > step && !(this.#good.has(s) && this.#durable.has(s))) return true;
    return false;
  }

  /**
   * Whether the last tier lists `step` as the same checkpoint tier 0 holds: a copy of another
   * checkpoint under that number (the one an overwrite replaced, still there while that tier was
   * down) is not this step's (`sameCheckpoint`).
   */
  #onLastTier(step: number): boolean {
    const last = this.#tiers.at(-1)!.opened;
    if (!last?.lists(step)) return false;
    return sameCheckpoint(this.#tiers[0]!.opened?.identityOf(step), last.identityOf(step));
  }
}
