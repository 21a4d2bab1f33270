/**
 * @cairn/distributed owns the ranks of a job: env:// rendezvous, the TCP rendezvous server and process group, and the cairn-run launcher.
 * It may import @cairn/core (the ProcessGroup interfaces, SingleProcessGroup, CheckpointError) and node: built-ins; core never imports it.
 */
export { type TcpProcessGroupOptions, TcpProcessGroup } from "./tcp-process-group.js";
export { type InitProcessGroupOptions, type InitializedProcessGroup, initProcessGroup } from "./init-process-group.js";
export { type LaunchOptions, type LaunchResult, launchRanks, parseLaunchArgs, freePort } from "./launch-ranks.js";
