// The notice sources a manager watches unless told otherwise, Node's side: process signals.
// Imported as "#platform/preemption/preemption-defaults.js"; the browser build gets preemption-defaults.browser.ts.
import { type DefaultPreemptionOptions, type PreemptionSource, SignalPreemptionSource } from "./preemption.js";

export function platformPreemptionSources(options: DefaultPreemptionOptions): PreemptionSource[] {
  return [new SignalPreemptionSource(options.preemptionSignals ?? ["SIGTERM"], options.signalTarget)];
}
