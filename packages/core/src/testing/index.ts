export { storageContractSuite } from "./storage-contract.js";
export { type ContractTestApi, type StorageContractOptions, defineStorageContract } from "./storage-contract-cases.js";
export {
  FaultyStorageAdapter,
  type Fault,
  type FaultyOperation,
  errnoError,
  errnoFaultCode,
} from "./faulty-storage-adapter.js";
export {
  FaultProxy,
  type FaultAction,
  type FaultRule,
  type FaultProxyOptions,
  type PreconditionEnforcer,
  type ProxiedRequest,
} from "./fault-proxy.js";
export {
  spawnTypeScript,
  runTypeScript,
  killTypeScript,
  typeScriptCommand,
  rankResults,
  type RankResult,
  type TypeScriptRun,
} from "./run-typescript.js";
export { type MeasuredWork, cpuSecondsOf, measureWork } from "./measure-work.js";
export { rejection } from "./rejection.js";
export { setContentHashing } from "../save/checksum-workers.js";
export { setStagedHook } from "../background/staging-sums.js";
export { seededRandom } from "./seeded-random.js";
export { freshDirs } from "./fresh-dirs.js";
