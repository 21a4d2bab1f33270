// @cairn/core/testing in a browser: the pieces that need neither vitest nor Node (the storage
// contract's cases, which a page's runner runs).
export { type ContractTestApi, type StorageContractOptions, defineStorageContract } from "./storage-contract-cases.js";
