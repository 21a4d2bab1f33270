import type { PreemptionSource } from "./preemption.js";

/** What PageLifecyclePreemptionSource listens on: `window` and `document`, or stand-ins in a test. */
export interface PageLifecycleTarget {
  readonly window: Pick<EventTarget, "addEventListener" | "removeEventListener">;
  readonly document: Pick<EventTarget, "addEventListener" | "removeEventListener"> & {
    readonly visibilityState: string;
  };
}

export interface PageLifecyclePreemptionOptions {
  /**
   * Also treat the page turning hidden (another tab, a minimised window, a phone's home screen)
   * as a notice (default true): on mobile it is the last event a page reliably gets before being
   * discarded. A training loop that must go on in a background tab passes false.
   */
  readonly hidden?: boolean;
  /** Default: the page's own `window` and `document`. */
  readonly target?: PageLifecycleTarget;
}

/**
 * A browser's stand-in for SIGTERM: `pagehide` (the tab closes, reloads or navigates away) and,
 * by default, `visibilitychange` to hidden. Best effort: after `pagehide` a page may run only
 * briefly, so the checkpoint it asks for is taken only if the page lives on (the back-forward
 * cache, a hidden tab); a save cut short is never listed, since only a committed step is.
 */
export class PageLifecyclePreemptionSource implements PreemptionSource {
  readonly #hidden: boolean;
  readonly #target: PageLifecycleTarget | undefined;
  #stop: (() => void) | undefined;

  constructor(options: PageLifecyclePreemptionOptions = {}) {
    this.#hidden = options.hidden ?? true;
    this.#target =
      options.target ??
      ((globalThis as { document?: unknown }).document ? (globalThis as unknown as PageLifecycleTarget) : undefined);
  }

  start(notify: (reason: string) => void): void {
    const target = this.#target;
    if (!target || this.#stop) return;
    const onPageHide = (): void => notify("the page is being hidden or unloaded (pagehide)");
    const onVisibility = (): void => {
      if (target.document.visibilityState === "hidden") notify("the page turned hidden (visibilitychange)");
    };
    target.window.addEventListener("pagehide", onPageHide);
    if (this.#hidden) target.document.addEventListener("visibilitychange", onVisibility);
    this.#stop = () => {
      target.window.removeEventListener("pagehide", onPageHide);
      target.document.removeEventListener("visibilitychange", onVisibility);
    };
  }

  stop(): void {
    this.#stop?.();
    this.#stop = undefined;
  }
}
