// @cairn/cli: the `cairn` command (bin); `runCli` runs it in-process, `startUiServer` serves
// `cairn ui` from a script (its HTTP API's types beside it). The operations the commands run are
// @cairn/core/ops and @cairn/manager's, for scripts that want them directly.
export { runCli, type CliIO } from "./main.js";
export { type Location, openLocation } from "./location.js";
export { type RunViewOptions, RunView } from "./ui/run-view.js";
export { type UiServer, type UiServerOptions, startUiServer } from "./ui/ui-server.js";
export type { StepRow, StepsResponse, Verification } from "./ui/ui-types.js";
