export { runCli, usage, commandUsage, COMMANDS, EXIT, THEN, type CliIO } from "./main.js";
export { type CommandSpec, type CommandContext, type OptionSpec, UsageError } from "./command.js";
export { type Output, type Progress, progressBar, formatBytes } from "./progress-bar.js";
export {
  type Location,
  openLocation,
  openFileLocation,
  checkpointMetadata,
  registerBundledStorage,
} from "./location.js";
export {
  type StepListing,
  type TieredStep,
  StepListingCache,
  collectGarbage,
  listSteps,
  mergeTiers,
  removeSteps,
} from "./steps.js";
export { type RunViewOptions, RunView } from "./ui/run-view.js";
export { type UiServer, type UiServerOptions, startUiServer } from "./ui/ui-server.js";
export type { StepRow, StepsResponse, Verification } from "./ui/ui-types.js";
