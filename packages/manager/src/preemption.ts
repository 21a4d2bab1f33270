/**
 * Tells a CheckpointManager that the machine is about to go away. `start` is called once by
 * the manager with the callback to call on a notice; `stop` by `close()`.
 */
export interface PreemptionSource {
  start(notify: (reason: string) => void): void;
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

  constructor(signals: readonly NodeJS.Signals[] = ["SIGTERM"], target: SignalTarget = process) {
    this.#signals = signals;
    this.#target = target;
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

export interface MetadataPreemptionOptions {
  /** The endpoint to poll. */
  readonly url: string;
  /** Poll period in ms (default 5 s). */
  readonly intervalMs?: number;
  readonly headers?: Readonly<Record<string, string>>;
  /** Whether a response is a notice (default: status 200 with body "TRUE", as GCE answers). */
  readonly isNotice?: (status: number, body: string) => boolean;
  /** Per-request timeout in ms (default 2 s). */
  readonly timeoutMs?: number;
  /** Injected for tests; defaults to the global fetch. */
  readonly fetch?: typeof fetch;
}

/**
 * A preemption notice from a cloud metadata endpoint, polled. Presets: `gce()` (the instance's
 * `preempted` flag) and `awsSpot()` (the spot `instance-action`, 404 until a notice; IMDSv1 —
 * with IMDSv2 enforced, pass a token header of your own). Failed polls are retried on the next tick.
 */
export class MetadataPreemptionSource implements PreemptionSource {
  readonly #options: MetadataPreemptionOptions;
  #timer: NodeJS.Timeout | undefined;
  #inFlight = false;

  constructor(options: MetadataPreemptionOptions) {
    this.#options = options;
  }

  static gce(options: Partial<MetadataPreemptionOptions> = {}): MetadataPreemptionSource {
    return new MetadataPreemptionSource({
      url: "http://metadata.google.internal/computeMetadata/v1/instance/preempted",
      headers: { "Metadata-Flavor": "Google" },
      ...options,
    });
  }

  static awsSpot(options: Partial<MetadataPreemptionOptions> = {}): MetadataPreemptionSource {
    return new MetadataPreemptionSource({
      url: "http://169.254.169.254/latest/meta-data/spot/instance-action",
      isNotice: (status) => status === 200,
      ...options,
    });
  }

  start(notify: (reason: string) => void): void {
    const { url, intervalMs = 5000, headers = {}, timeoutMs = 2000 } = this.#options;
    const isNotice = this.#options.isNotice ?? ((status: number, body: string) => status === 200 && body.trim().toUpperCase() === "TRUE");
    const fetchFn = this.#options.fetch ?? fetch;
    const poll = async (): Promise<void> => {
      if (this.#inFlight) return;
      this.#inFlight = true;
      try {
        const response = await fetchFn(url, { headers, signal: AbortSignal.timeout(timeoutMs) });
        const body = await response.text();
        if (isNotice(response.status, body)) {
          this.stop();
          notify(`preemption notice from ${url}`);
        }
      } catch {
        // The endpoint may be briefly unreachable; the next tick asks again.
      } finally {
        this.#inFlight = false;
      }
    };
    this.#timer = setInterval(() => void poll(), intervalMs);
    // Polling alone must not keep a finished training script alive.
    this.#timer.unref();
    void poll();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
