/**
 * @cairn/distributed owns the ranks of a job: env:// rendezvous, the TCP rendezvous server and process group, the Store interface
 * with the process group over it (etcd, Redis), and the cairn-run launcher. It may import @cairn/core and node: built-ins; core never imports it.
 */
export { type TcpProcessGroupOptions, TcpProcessGroup } from "./tcp-process-group.js";
export { type Store, type StoreOptions, DEFAULT_LEASE_MS } from "./store.js";
export { type StoreFactory, registerStore, openStore } from "./store-registry.js";
export { type StoreProcessGroupOptions, StoreProcessGroup } from "./store-process-group.js";
export { type InitProcessGroupOptions, type InitializedProcessGroup, initProcessGroup } from "./init-process-group.js";
export { type LaunchOptions, type LaunchResult, launchRanks, parseLaunchArgs, freePort } from "./launch-ranks.js";
