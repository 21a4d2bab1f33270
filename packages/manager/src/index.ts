export {
  CheckpointManager,
  type CheckpointManagerOptions,
  type CloseOptions,
  type JoinResult,
  type RestoreOptions,
  type RetentionFailure,
  type SaveStepOptions,
  type StepMetadata,
  type TierState,
  type UnreplicatedStep,
} from "./checkpoint-manager.js";
export { type ReplicationOptions, type TierOptions } from "./tier-config.js";
export { type ManagerEvents, type ManagerEventName, type ManagerOperation } from "./manager-events.js";
export { type PreemptionSource, type SignalTarget, SignalPreemptionSource } from "./preemption.js";
export {
  type PageLifecycleTarget,
  type PageLifecyclePreemptionOptions,
  PageLifecyclePreemptionSource,
} from "./page-lifecycle-preemption.js";
export {
  type MetadataPreemptionOptions,
  type AwsSpotOptions,
  MetadataPreemptionSource,
} from "./metadata-preemption.js";
export { type MetadataSession } from "./metadata-request.js";
export { type ImdsSessionOptions, ImdsSession } from "./imds-session.js";
export { type RetentionOptions, type StepRecord, stepsToDelete } from "./retention-policy.js";
export { type RetentionPass, type DamagedStepListener, StepStore } from "./step-store.js";
export { stepDir, parseStep, checkStep } from "./step-naming.js";
