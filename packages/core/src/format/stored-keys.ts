import { CheckpointError, type CheckpointErrorCode } from "../errors.js";
import { type KeyPath, isForbiddenKey } from "../state/state-dict.js";

// Keys from foreign files (safetensors names and layouts, tfjs model.json) checked before they become a checkpoint.

/** Why a key is refused, for messages. */
export function forbiddenKeyReason(key: string): string {
  return `the key ${JSON.stringify(key)} is not allowed in a checkpoint (read back into an object it would reach Object.prototype)`;
}

/**
 * Refuses a key path from a foreign file (an import's tensor names, a tfjs weight name) that
 * holds a forbidden key, naming it: core refuses such a checkpoint, so it must not be written.
 */
export function checkKeyPath(key: KeyPath, where: string, code: CheckpointErrorCode, what: string): void {
  const bad = key.find(isForbiddenKey);
  if (bad === undefined) return;
  throw new CheckpointError(code, `${where}: ${what}: ${forbiddenKeyReason(String(bad))}`, {
    context: { path: where, key: key.join(".") },
  });
}

/**
 * JSON.parse for JSON read from storage whose objects become maps or user metadata: a forbidden
 * key at any depth is refused (`refuse` makes the error), so no object built from it can reach a prototype.
 */
export function parseStoredJson(text: string, refuse: (key: string) => CheckpointError): unknown {
  return JSON.parse(text, function (this: unknown, key: string, value: unknown) {
    if (!Array.isArray(this) && isForbiddenKey(key)) throw refuse(key);
    return value;
  });
}
