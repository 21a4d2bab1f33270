export { managerRunSuite, runState, sameState, type ManagerRunOptions } from "./manager-run-suite.js";
export { stepListingSuite, type StepListingOptions } from "./step-listing-suite.js";
export { tieredRunSuite, type TieredRunOptions } from "./tiered-run-suite.js";
export {
  durabilitySuite,
  truncateDataFile,
  type DurabilitySuiteOptions,
  type DurableTier,
} from "./durability-suite.js";
export { durabilityPropertySuite, type DurabilityPropertyOptions } from "./durability-property-suite.js";
export { FullOutageStorage, OutageStorage } from "./outage-storage.js";
export { overwriteUncopiedStep } from "./rollback.js";
