/**
 * Tells a CheckpointManager that the machine is about to go away. `start` is called once by
 * the manager with the callback to call on a notice, and one to call when the source cannot
 * watch (an endpoint it cannot reach: the manager emits it as an `error` event); `stop` by `close()`.
 */
export interface PreemptionSource {
  start(notify: (reason: string) => void, report?: (error: unknown) => void): void;
  stop(): void;
}

/** What SignalPreemptionSource listens on: `process`, or a stand-in a test emits signals on. */
export interface SignalTarget {
  on(signal: NodeJS.Signals, listener: (signal: NodeJS.Signals) => void): unknown;
  off(signal: NodeJS.Signals, listener: (signal: NodeJS.Signals) => void): unknown;
}

/**
 * A preemption notice from process signals (SIGTERM by default, as Kubernetes, GCE and AWS spot
 * send). While it listens, those signals no longer end the process: the training loop is
 * expected to take its last checkpoint and stop itself (`reachedPreemption`).
 */
export class SignalPreemptionSource implements PreemptionSource {
  readonly #signals: readonly NodeJS.Signals[];
  readonly #target: SignalTarget;
  #listener: ((signal: NodeJS.Signals) => void) | undefined;

  constructor(signals: readonly NodeJS.Signals[] = ["SIGTERM"], target?: SignalTarget) {
    this.#signals = signals;
    // Read from globalThis, so a browser bundle of this file refers to no Node global.
    const process = (globalThis as { process?: SignalTarget }).process;
    if (!target && !process)
      throw new TypeError("SignalPreemptionSource: no process here; pass the target to listen on");
    this.#target = (target ?? process)!;
  }

  start(notify: (reason: string) => void): void {
    this.#listener = (signal) => notify(`received ${signal}`);
    for (const signal of this.#signals) this.#target.on(signal, this.#listener);
  }

  stop(): void {
    if (!this.#listener) return;
    for (const signal of this.#signals) this.#target.off(signal, this.#listener);
    this.#listener = undefined;
  }
}

/** What picks the notice sources a manager watches by default (the manager's own options). */
export interface DefaultPreemptionOptions {
  /** Signals that mean preemption (default SIGTERM). */
  readonly preemptionSignals?: readonly NodeJS.Signals[];
  /** Where signals are listened for (default `process`; in a page, its lifecycle instead). */
  readonly signalTarget?: SignalTarget;
}
