import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type StorageContractOptions, defineStorageContract } from "./storage-contract-cases.js";

/**
 * The behaviour every `StorageAdapter` promises, as one vitest suite. An adapter package calls
 * it from its own test file with a factory for fresh roots:
 *
 * ```ts
 * storageContractSuite("s3 via s3rver", { open: () => openS3(...) });
 * ```
 */
export function storageContractSuite(name: string, options: StorageContractOptions): void {
  defineStorageContract({ describe, it, beforeEach, afterEach, expect }, name, options);
}
