import { isPermanent, unrefTimer } from "@cairn/core";
import { backoffDelay, longTimer } from "@cairn/core/storage";

/** A step not (yet) copied to a tier: queued, being copied, waiting to retry, or given up on (`permanent`). */
export interface UnreplicatedStep {
  readonly step: number;
  readonly tier: number;
  /** The latest failure of its copy, if any. */
  readonly error?: unknown;
  /** True when the copy cannot succeed by retrying (its source is damaged or gone): it is no longer tried. */
  readonly permanent?: boolean;
}

interface Job {
  readonly step: number;
  readonly tier: number;
  error?: unknown;
  permanent?: boolean;
  running: boolean;
  /** The running copy, settling once it and the collectives it joined are done (it never rejects). */
  run?: Promise<void>;
  /** Aborted when the job is dropped (its step deleted, or saved again): its outcome no longer counts. */
  readonly dropped: AbortController;
}

/** A destination tier's outage: its copies wait until `notBefore`, then the newest is tried. */
interface Outage {
  attempts: number;
  notBefore: number;
  error: unknown;
}

export interface ReplicationQueueOptions {
  /** Copies `step` into `tier`; resolves once it is committed there (or found committed). */
  readonly copy: (step: number, tier: number, signal: AbortSignal) => Promise<void>;
  /** A tier's copies started failing (once per outage), or one step's copy failed for good. */
  readonly report: (step: number, tier: number, error: unknown) => void;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  readonly random?: () => number;
}

function key(step: number, tier: number): string {
  return `${tier}/${step}`;
}

/**
 * Copies committed steps down the tiers in the background, one copy per destination tier at a
 * time, newest step first (so after an outage the freshest state is durable first, and a
 * preemption checkpoint goes before older ones). After a failed copy the tier is tried again
 * after a backoff that doubles up to `maxDelayMs`, with its newest step; its failures are
 * reported once per outage (the first failure after a success), a permanent failure once per
 * step. Nothing here ever rejects a save.
 */
export class ReplicationQueue {
  readonly #options: ReplicationQueueOptions;
  readonly #jobs = new Map<string, Job>();
  /** Tiers whose latest copy failed. */
  readonly #failing = new Map<number, Outage>();
  readonly #running = new Set<number>();
  readonly #timers = new Map<number, NodeJS.Timeout>();
  readonly #watchers = new Set<() => void>();
  readonly #abort = new AbortController();
  /** The copies running, each settling once its copy (and the collectives it joined) is done. */
  readonly #inflight = new Set<Promise<void>>();

  constructor(options: ReplicationQueueOptions) {
    this.#options = options;
  }

  /** Queues a copy of `step` into `tier` (no-op if already queued); starts it if the tier is free. */
  add(step: number, tier: number): void {
    if (this.#abort.signal.aborted) return;
    const k = key(step, tier);
    const existing = this.#jobs.get(k);
    if (existing && !existing.permanent) return;
    this.#jobs.set(k, { step, tier, running: false, dropped: new AbortController() });
    this.#kick(tier);
  }

  /**
   * Drops the copies of `step` (deleted, or about to be saved again): a running one is aborted and
   * its outcome ignored, so a later `add` of the step queues a copy of what is committed then.
   * Resolves once the running ones have ended: an abort that comes after a copy sent its commit
   * does not stop the commit, so whoever deletes the step must wait for it first.
   */
  remove(step: number): Promise<void> {
    const running: Promise<void>[] = [];
    for (const [k, job] of this.#jobs) {
      if (job.step !== step) continue;
      this.#jobs.delete(k);
      job.dropped.abort();
      if (job.run) running.push(job.run);
    }
    this.#changed();
    return Promise.all(running).then(() => undefined);
  }

  /** Whether a copy of `step` into `tier` is queued or running. */
  has(step: number, tier: number): boolean {
    const job = this.#jobs.get(key(step, tier));
    return job !== undefined && !job.permanent;
  }

  /** Whether `step` is being read by a running copy (its source tiers must keep it). */
  isCopying(step: number): boolean {
    for (const job of this.#jobs.values()) if (job.step === step && job.running) return true;
    return false;
  }

  /** The latest failure of copies into `tier` while they fail. */
  failing(tier: number): unknown {
    return this.#failing.get(tier)?.error;
  }

  /** Every copy not done, newest first. */
  unreplicated(): UnreplicatedStep[] {
    return [...this.#jobs.values()]
      .sort((a, b) => b.step - a.step || a.tier - b.tier)
      .map((j) => {
        const error = j.error ?? this.#failing.get(j.tier)?.error;
        return {
          step: j.step,
          tier: j.tier,
          ...(error === undefined ? {} : { error }),
          ...(j.permanent ? { permanent: true } : {}),
        };
      });
  }

  /** Resolves once no copy is running or due: every job left waits for its tier's outage to end, or was given up on. */
  settled(): Promise<void> {
    return this.#until(() =>
      [...this.#jobs.values()].every((j) => j.permanent || (!j.running && this.#failing.has(j.tier))),
    );
  }

  /** Resolves once every copy succeeded or was given up on, or after `timeoutMs`. */
  async drained(timeoutMs: number): Promise<void> {
    let cancel = (): void => undefined;
    await Promise.race([
      this.#until(() => [...this.#jobs.values()].every((j) => j.permanent)),
      new Promise<void>((resolve) => {
        cancel = longTimer(resolve, timeoutMs, { ref: true });
      }),
    ]);
    cancel();
  }

  /** Stops: no new copy starts, running ones are aborted, timers cleared; resolves once the aborted ones settled. */
  async stop(): Promise<void> {
    this.#abort.abort();
    for (const timer of this.#timers.values()) clearTimeout(timer);
    this.#timers.clear();
    this.#changed();
    await Promise.all(this.#inflight);
  }

  #until(done: () => boolean): Promise<void> {
    if (done()) return Promise.resolve();
    return new Promise((resolve) => {
      const check = (): void => {
        if (!done() && !this.#abort.signal.aborted) return;
        this.#watchers.delete(check);
        resolve();
      };
      this.#watchers.add(check);
    });
  }

  #changed(): void {
    for (const watcher of [...this.#watchers]) watcher();
  }

  /** Starts the tier's next due copy unless one is running; with only waiting ones, a timer for the earliest. */
  #kick(tier: number): void {
    if (this.#running.has(tier) || this.#abort.signal.aborted) return;
    clearTimeout(this.#timers.get(tier));
    this.#timers.delete(tier);
    let next: Job | undefined;
    for (const job of this.#jobs.values())
      if (job.tier === tier && !job.permanent && (!next || job.step > next.step)) next = job;
    if (!next) return;
    const wait = (this.#failing.get(tier)?.notBefore ?? 0) - Date.now();
    if (wait <= 0) {
      const run = this.#run(next);
      next.run = run;
      this.#inflight.add(run);
      void run.finally(() => this.#inflight.delete(run));
    } else {
      const timer = setTimeout(() => this.#kick(tier), wait);
      unrefTimer(timer);
      this.#timers.set(tier, timer);
    }
  }

  async #run(job: Job): Promise<void> {
    this.#running.add(job.tier);
    job.running = true;
    try {
      await this.#options.copy(job.step, job.tier, AbortSignal.any([this.#abort.signal, job.dropped.signal]));
      if (this.#jobs.get(key(job.step, job.tier)) === job) this.#jobs.delete(key(job.step, job.tier));
      this.#failing.delete(job.tier);
    } catch (error) {
      job.error = error;
      if (this.#abort.signal.aborted) {
        // Stopped: the job stays listed as not replicated.
      } else if (job.dropped.signal.aborted) {
        // Dropped while running: a copy of the step as committed now is queued on its own.
      } else if (isPermanent(error)) {
        job.permanent = true;
        this.#options.report(job.step, job.tier, error);
      } else {
        const outage = this.#failing.get(job.tier) ?? { attempts: 0, notBefore: 0, error };
        if (outage.attempts === 0) this.#options.report(job.step, job.tier, error);
        const delay = backoffDelay(outage.attempts + 1, this.#options, "equal", this.#options.random);
        this.#failing.set(job.tier, { attempts: outage.attempts + 1, notBefore: Date.now() + delay, error });
      }
    } finally {
      job.running = false;
      this.#running.delete(job.tier);
      this.#changed();
      this.#kick(job.tier);
    }
  }
}
