export { storageContractSuite, type StorageContractOptions } from "./storage-contract.js";
export { FaultyStorageAdapter, type Fault, type FaultyOperation } from "./faulty-storage-adapter.js";
