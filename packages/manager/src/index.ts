export { CheckpointManager, type CheckpointManagerOptions, type SaveStepOptions, type StepMetadata } from "./checkpoint-manager.js";
export { type ManagerEvents, type ManagerEventName } from "./manager-events.js";
export { type PreemptionSource, type SignalTarget, type MetadataPreemptionOptions, SignalPreemptionSource, MetadataPreemptionSource } from "./preemption.js";
export { type RetentionOptions, type StepRecord, stepsToDelete } from "./retention-policy.js";
export { getStateDict, setStateDict, primeOptimizer } from "./tfjs-state.js";
export { StepStore } from "./step-store.js";
export { stepDir, parseStep, checkStep } from "./step-naming.js";
