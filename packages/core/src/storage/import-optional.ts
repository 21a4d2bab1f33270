import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

function isModuleNotFound(error: unknown, specifier: string): boolean {
  const e = error as { code?: string; message?: string };
  return (e.code === "ERR_MODULE_NOT_FOUND" || e.code === "MODULE_NOT_FOUND") && (e.message ?? "").includes(specifier);
}

/**
 * Imports a package the user installed beside Cairn, or resolves `undefined` if it is not
 * installed. It first resolves from @cairn/core itself, then from the working directory's
 * project, since a strict (pnpm) layout hides the user's dependencies from core.
 */
export async function importOptional<T>(specifier: string): Promise<T | undefined> {
  try {
    return (await import(specifier)) as T;
  } catch (error) {
    if (!isModuleNotFound(error, specifier)) throw error;
  }
  let resolved: string;
  try {
    resolved = createRequire(join(process.cwd(), "noop.js")).resolve(specifier);
  } catch {
    return undefined;
  }
  return (await import(pathToFileURL(resolved).href)) as T;
}
