/**
 * @cairn/distributed owns the ranks of a job: env:// rendezvous, the Store interface and the process group over
 * it, the embedded TCP store (etcd and Redis in their own packages), and the cairn-run launcher. It may import @cairn/core and node: built-ins; core never imports it.
 */
export { type TcpProcessGroupOptions, connectTcpProcessGroup } from "./tcp-process-group.js";
export { type TcpStoreOptions, TcpStore } from "./tcp-store.js";
export { type TcpStoreServerOptions, TcpStoreServer } from "./tcp-store-server.js";
export { type Store, type StoreOptions, DEFAULT_LEASE_MS } from "./store.js";
export { STORE_DEADLINE_MS, withDeadline } from "./store-deadline.js";
export { type StoreFactory, registerStore, openStore } from "./store-registry.js";
export { type StoreProcessGroupOptions, StoreProcessGroup } from "./store-process-group.js";
export { type InitProcessGroupOptions, type InitializedProcessGroup, initProcessGroup } from "./init-process-group.js";
export { type LaunchOptions, type LaunchResult, launchRanks, parseLaunchArgs, freePort } from "./launch-ranks.js";
