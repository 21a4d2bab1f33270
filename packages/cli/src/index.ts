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
export { type StepListing, listSteps, removeSteps, collectGarbage } from "./steps.js";
