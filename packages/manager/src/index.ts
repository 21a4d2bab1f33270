export { CheckpointManager } from "./checkpoint-manager.js";
export type {
  AsyncSaveOptions,
  CheckpointManagerOptions,
  CloseOptions,
  FlatManagerOptions,
  ManagerRetentionOptions,
  PreemptionOptions,
} from "./checkpoint-manager-options.js";
export type { LatestStepOptions, RestoreOptions, SaveStepOptions } from "./arguments/manager-arguments.js";
export type { RetentionFailure, StepMetadata } from "./steps/step-store.js";
export type { JoinResult } from "./tiers/tier-set.js";
export type { ManagerHealth } from "./durability/loss-budget.js";
export type { DurabilityOptions, OnExceeded } from "./durability/durability-options.js";
export type { TierState } from "./tiers/tier.js";
export type { UnreplicatedStep } from "./tiers/replication-queue.js";
export {
  type SaveDecisionPolicy,
  AnySavePolicy,
  FixedIntervalPolicy,
  SpecificStepsPolicy,
} from "./pipeline/save-policy.js";
export { type ReplicationOptions, type TierOptions, type UnlistedTiers } from "./tiers/tier-config.js";
export { type ManagerEvents, type ManagerEventName, type ManagerOperation } from "./events/manager-events.js";
export { type PreemptionSource, type SignalTarget, SignalPreemptionSource } from "./preemption/preemption.js";
export {
  type PageLifecycleTarget,
  type PageLifecyclePreemptionOptions,
  PageLifecyclePreemptionSource,
} from "./preemption/page-lifecycle-preemption.js";
export {
  type MetadataPreemptionOptions,
  type AwsSpotOptions,
  MetadataPreemptionSource,
} from "./preemption/metadata-preemption.js";
export { type MetadataSession } from "./preemption/metadata-request.js";
export { type ImdsSessionOptions, ImdsSession } from "./preemption/imds-session.js";
export { type RetentionOptions, type StepRecord, stepsToDelete } from "./steps/retention-policy.js";
export { type RetentionPass, type DamagedStepListener, StepStore } from "./steps/step-store.js";
export { stepDir, parseStep, checkStep } from "./steps/step-naming.js";
export {
  type ListStepsOptions,
  type RootListing,
  type StepListing,
  type StepProblem,
  type StepState,
  StepListingCache,
  committedStepsUnder,
  listSteps,
} from "./steps/step-listing.js";
export { type CollectedGarbage, type RemovedSteps, collectGarbage, removeSteps } from "./steps/step-cleanup.js";
export { type TieredStep, mergeTiers } from "./tiers/tier-listing.js";
export { type StepVerification, type VerifyStepOptions, verifyStep } from "./steps/step-verification.js";
export {
  type ExamineOptions,
  type ExaminedCopy,
  type ExaminedStep,
  type Leftover,
  type TiersExamination,
  examineTiers,
} from "./tiers/tier-examination.js";
