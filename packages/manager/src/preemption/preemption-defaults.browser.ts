// In a page there are no signals: the page's lifecycle (pagehide, hidden) plays SIGTERM's part.
import { PageLifecyclePreemptionSource } from "./page-lifecycle-preemption.js";
import { type DefaultPreemptionOptions, type PreemptionSource, SignalPreemptionSource } from "./preemption.js";

export function platformPreemptionSources(options: DefaultPreemptionOptions): PreemptionSource[] {
  if (options.signalTarget)
    return [new SignalPreemptionSource(options.preemptionSignals ?? ["SIGTERM"], options.signalTarget)];
  return typeof (globalThis as { document?: unknown }).document === "undefined"
    ? []
    : [new PageLifecyclePreemptionSource()];
}
