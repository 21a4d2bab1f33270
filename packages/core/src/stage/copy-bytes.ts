import { Buffer } from "node:buffer";
import { readFileSync } from "node:fs";

/** How a copy into staging memory is made. */
export type CopyMethod = "memcpy" | "set";

/**
 * V8's `set` into a SharedArrayBuffer (staging memory is shared) copies with relaxed atomic loads
 * and stores, a machine word at a time, and a byte at a time when source and target are not
 * equally aligned (`base::Relaxed_Memcpy`); Buffer's `fill` with a buffer of the same length is
 * one libc `memcpy`. Which is faster depends on the machine: glibc's memcpy of a copy above its
 * non-temporal threshold was 3× slower than `set` on one CPU when the target sat a little past
 * the source in the page, and 2× faster on another (docs/benchmarks.md, stage34f and stage34h).
 */
const copiers: Readonly<Record<CopyMethod, (target: Uint8Array, offset: number, source: Uint8Array) => void>> = {
  memcpy: (target, offset, source) =>
    void Buffer.from(target.buffer, target.byteOffset + offset, source.byteLength).fill(source),
  set: (target, offset, source) => target.set(source, offset),
};

/** Below this, a copy is a `set`: making a Buffer for it costs more than the copy can gain. */
const SMALL = 16 << 10;
/** Copies this large may take libc's non-temporal path, whose speed depends on where the target sits in its page. */
const LARGE = 32 << 20;
/** Copies each method makes of one kind before the faster is chosen; large ones are few and long. */
const TRIALS = { medium: 32, large: 2 } as const;
/**
 * A large kind is chosen after one copy each way when the two differ plainly: the slower took
 * 1.6–4× the faster (the gaps stage34f and stage34h measured), and the faster at least 20 ms of
 * CPU, so a scheduler tick's error cannot make that ratio. Outside that band (alike, or a copy
 * that paid for page faults, or one too short to time) the second copies decide as before.
 */
const DECISIVE = { minMs: 20, minRatio: 1.6, maxRatio: 4 } as const;

/** What one kind of copy has measured so far: the fastest each method went, in ms per byte. */
interface Trials {
  readonly best: Record<CopyMethod, number>;
  readonly count: Record<CopyMethod, number>;
  /** How long each method's last copy took, in ms. */
  readonly lastMs: Record<CopyMethod, number>;
  chosen: CopyMethod | undefined;
}

/**
 * Chooses per kind of copy, by timing the first copies of that kind made each way in turn, the
 * faster of `memcpy` and `set`, then keeps it. Kinds: medium copies, and large copies by the
 * target's place in its page (in eighths: where libc's large copies can be slow). The fastest
 * copy of each method is kept, so a copy that waited for a core weighs nothing.
 */
export class CopyChooser {
  readonly #kinds = new Map<string, Trials>();
  readonly #now: () => number;
  readonly #nowLarge: () => number;

  /**
   * `now` times medium copies (tens of µs: wall time, rarely interrupted); `nowLarge` times large
   * ones (tens of ms, which a busy machine interrupts: this thread's CPU time where Linux says).
   */
  constructor(now: () => number = () => performance.now(), nowLarge: () => number = threadCpuMsOr(now)) {
    this.#now = now;
    this.#nowLarge = nowLarge;
  }

  /** The method chosen so far for each kind of copy measured (for tests and reports). */
  get chosen(): ReadonlyMap<string, CopyMethod | undefined> {
    return new Map([...this.#kinds].map(([kind, trials]) => [kind, trials.chosen]));
  }

  /** Copies `source` into `target` at `offset`. */
  copy(target: Uint8Array, offset: number, source: Uint8Array): void {
    const bytes = source.byteLength;
    if (bytes < SMALL) {
      target.set(source, offset);
      return;
    }
    if (offset < 0 || offset + bytes > target.byteLength) throw new RangeError("offset is out of bounds");
    // Where source and target are not aligned alike (buffers start at least 8-aligned), `set`
    // would copy byte by byte: several times slower than any memcpy.
    if ((target.byteOffset + offset - source.byteOffset) % 8 !== 0) {
      copiers.memcpy(target, offset, source);
      return;
    }
    const large = bytes >= LARGE;
    const kind = large ? `large@${((target.byteOffset + offset) & 4095) >> 9}` : "medium";
    let trials = this.#kinds.get(kind);
    if (trials === undefined) {
      trials = {
        best: { memcpy: Infinity, set: Infinity },
        count: { memcpy: 0, set: 0 },
        lastMs: { memcpy: 0, set: 0 },
        chosen: undefined,
      };
      this.#kinds.set(kind, trials);
    }
    if (trials.chosen !== undefined) {
      copiers[trials.chosen](target, offset, source);
      return;
    }
    const method: CopyMethod = trials.count.memcpy <= trials.count.set ? "memcpy" : "set";
    const now = large ? this.#nowLarge : this.#now;
    const started = now();
    copiers[method](target, offset, source);
    const ms = now() - started;
    trials.best[method] = Math.min(trials.best[method], ms / bytes);
    trials.count[method]++;
    trials.lastMs[method] = ms;
    if (trials.count.set >= TRIALS[large ? "large" : "medium"] || (large && decisive(trials)))
      trials.chosen = trials.best.memcpy < trials.best.set ? "memcpy" : "set";
  }
}

/** After one large copy each way: whether the two differ plainly, both long enough to time (see DECISIVE). */
function decisive(trials: Trials): boolean {
  if (trials.count.memcpy !== 1 || trials.count.set !== 1) return false;
  const { best, lastMs } = trials;
  const ratio = Math.max(best.memcpy, best.set) / Math.min(best.memcpy, best.set);
  return (
    Math.min(lastMs.memcpy, lastMs.set) >= DECISIVE.minMs && ratio >= DECISIVE.minRatio && ratio <= DECISIVE.maxRatio
  );
}

/**
 * This thread's CPU time in ms (`/proc/thread-self/schedstat`: exact to a scheduler tick, a few
 * ms, and about 80 µs a read, so only for copies of tens of ms), or `fallback` where it cannot be read.
 */
function threadCpuMsOr(fallback: () => number): () => number {
  const read = (): number => Number(readFileSync("/proc/thread-self/schedstat", "latin1").split(" ", 1)[0]) / 1e6;
  try {
    return Number.isFinite(read()) ? read : fallback;
  } catch {
    return fallback;
  }
}

const chooser = new CopyChooser();

/** The method this process chose so far for each kind of copy it has measured (reports and benchmarks). */
export function copyChoices(): ReadonlyMap<string, CopyMethod | undefined> {
  return chooser.chosen;
}

/**
 * Copies `source` into `target` at `offset` (as `target.set(source, offset)` does), by libc's
 * memcpy or V8's `set`, whichever this process measured faster for copies like it.
 */
export function copyBytes(target: Uint8Array, offset: number, source: Uint8Array): void {
  chooser.copy(target, offset, source);
}
