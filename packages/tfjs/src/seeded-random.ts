import { CheckpointError, type StateDict, type Stateful } from "@cairn/core";
import seedrandom from "seedrandom";
import { invalid } from "./invalid-argument.js";

/** Alea's state: what seedrandom exports and restores with `{ state }`. */
type AleaState = seedrandom.State.Alea;

function checkSeed(seed: unknown, what: string): asserts seed is number {
  if (typeof seed !== "number" || !Number.isSafeInteger(seed)) throw invalid(what, "a safe integer", seed);
}

/**
 * A seed for tfjs ops and layers (`tf.randomUniform(…, seed)`, a Dropout's `seed`) that depends
 * only on `seed` and `parts`: the same numbers give the same seed in any process, so a draw can
 * be tied to a step instead of to how many draws came before. Never 0, which some tfjs ops
 * take for "no seed" (`Math.random`).
 */
export function derivedSeed(seed: number, ...parts: readonly number[]): number {
  checkSeed(seed, "derivedSeed's seed");
  for (const part of parts) checkSeed(part, "derivedSeed's parts");
  return seedrandom.alea([seed, ...parts].join(":")).int32() >>> 1 || 1;
}

/**
 * A seeded random source whose position is part of a checkpoint (`Stateful`): save it beside
 * the model, restore it, and it continues with the very numbers an uninterrupted run would
 * draw. Alea, the generator tfjs seeds its own random ops with.
 *
 * Call order: construct with a seed, draw; `stateDict()` snapshots the position (the manager
 * calls it when saving); `loadStateDict()` moves to a saved position and throws `mismatch` for a
 * state that is not Alea's (from another kind of entry or a damaged checkpoint).
 */
export class SeededRandom implements Stateful {
  #seed: number;
  #prng: seedrandom.StatefulPRNG<AleaState>;

  constructor(seed: number) {
    checkSeed(seed, "SeededRandom's seed");
    this.#seed = seed;
    this.#prng = seedrandom.alea(String(seed), { state: true });
  }

  /** The seed it was constructed with (or the saved run's, after `loadStateDict`). */
  get seed(): number {
    return this.#seed;
  }

  /** A number in [0, 1), 32 bits of randomness. */
  next(): number {
    return this.#prng();
  }

  /** A signed 32-bit integer. */
  int32(): number {
    return this.#prng.int32();
  }

  /** A seed for one tfjs random op: a positive 31-bit integer, never 0. */
  nextSeed(): number {
    return this.#prng.int32() >>> 1 || 1;
  }

  /** The integers 0 … n-1 in a random order (Fisher–Yates). */
  permutation(n: number): Int32Array {
    if (!Number.isSafeInteger(n) || n < 0 || n > 0x7fffffff) throw invalid("permutation's n", "an integer ≥ 0", n);
    const order = new Int32Array(n);
    for (let i = 0; i < n; i++) order[i] = i;
    for (let i = n - 1; i > 0; i--) {
      const j = Math.floor(this.#prng() * (i + 1));
      const t = order[i]!;
      order[i] = order[j]!;
      order[j] = t;
    }
    return order;
  }

  stateDict(): StateDict {
    const { c, s0, s1, s2 } = this.#prng.state();
    return { seed: this.#seed, alea: [c, s0, s1, s2] };
  }

  loadStateDict(stateDict: StateDict): void {
    const { seed, alea } = stateDict;
    const state = Array.isArray(alea) ? (alea as unknown[]) : [];
    const [c, s0, s1, s2] = state as number[];
    // Alea keeps three fractions in [0, 1) and a carry below 2^32: anything else is not its state.
    const fraction = (v: unknown): boolean => typeof v === "number" && v >= 0 && v < 1;
    if (
      typeof seed !== "number" ||
      !Number.isSafeInteger(seed) ||
      state.length !== 4 ||
      typeof c !== "number" ||
      !Number.isSafeInteger(c) ||
      c < 0 ||
      c >= 2 ** 32 ||
      ![s0, s1, s2].every(fraction)
    ) {
      throw new CheckpointError(
        "mismatch",
        "the saved random source is not a SeededRandom's state ({ seed, alea: [c, s0, s1, s2] })",
      );
    }
    this.#seed = seed;
    this.#prng = seedrandom.alea("", { state: { c, s0: s0!, s1: s1!, s2: s2! } });
  }
}
