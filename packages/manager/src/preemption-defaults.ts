// The notice sources a manager watches unless told otherwise, Node's side: process signals.
// Imported as "#platform/preemption-defaults.js"; the browser build gets preemption-defaults.browser.ts.
import type { CheckpointManagerOptions } from "./checkpoint-manager-options.js";
import { type PreemptionSource, SignalPreemptionSource } from "./preemption.js";

export function platformPreemptionSources(options: CheckpointManagerOptions): PreemptionSource[] {
  return [new SignalPreemptionSource(options.preemptionSignals ?? ["SIGTERM"], options.signalTarget)];
}
