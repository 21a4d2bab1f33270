export { managerRunSuite, sameState, type ManagerRunOptions } from "./manager-run-suite.js";
export { stepListingSuite, type StepListingOptions } from "./step-listing-suite.js";
