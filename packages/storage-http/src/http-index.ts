import { CheckpointError } from "@cairn/core";
import { type ObjectInfo, checkRelativePath } from "@cairn/core/storage";

/** The file at a published root that lists its objects, since HTTP cannot list (written by `cairn publish`). */
export const HTTP_INDEX_FILE = "cairn-index.json";
export const HTTP_INDEX_FORMAT = "cairn-http-index";

/** Objects one index may list: far past any real root, small enough that a hostile index cannot exhaust memory. */
const MAX_OBJECTS = 1_000_000;

export interface HttpIndex {
  readonly format: typeof HTTP_INDEX_FORMAT;
  readonly version: 1;
  readonly objects: readonly { readonly path: string; readonly size: number }[];
}

/** The objects an index lists, every path and size checked (an index is read from the network: hostile). */
export function parseHttpIndex(bytes: Uint8Array, where: string): ObjectInfo[] {
  const corrupt = (what: string): CheckpointError =>
    new CheckpointError("corrupt", `${where}: ${what}; publish the root again with cairn publish`, {
      context: { path: where },
    });
  let raw: unknown;
  try {
    raw = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch {
    throw corrupt("not a JSON index");
  }
  const index = raw as Partial<HttpIndex>;
  if (typeof raw !== "object" || raw === null || index.format !== HTTP_INDEX_FORMAT)
    throw corrupt(`not a ${HTTP_INDEX_FORMAT} file`);
  if (index.version !== 1) throw corrupt(`index version ${String(index.version)} is not one this Cairn reads (1)`);
  if (!Array.isArray(index.objects) || index.objects.length > MAX_OBJECTS) throw corrupt("objects must be an array");
  const seen = new Set<string>();
  return index.objects.map((object: unknown) => {
    const { path, size } = (object ?? {}) as { path?: unknown; size?: unknown };
    if (typeof path !== "string" || path === "" || path === HTTP_INDEX_FILE || seen.has(path))
      throw corrupt(`an object path ${JSON.stringify(path)} is empty, repeated or the index itself`);
    try {
      checkRelativePath("https", path);
    } catch {
      throw corrupt(`the object path ${JSON.stringify(path)} leaves the root`);
    }
    if (typeof size !== "number" || !Number.isSafeInteger(size) || size < 0)
      throw corrupt(`the size of ${JSON.stringify(path)} is not a byte count`);
    seen.add(path);
    return { path, size };
  });
}

/** An index listing `objects`, sorted, as `cairn publish` writes it. */
export function encodeHttpIndex(objects: readonly ObjectInfo[]): Uint8Array {
  const sorted = [...objects].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  const index: HttpIndex = {
    format: HTTP_INDEX_FORMAT,
    version: 1,
    objects: sorted.map(({ path, size }) => ({ path, size })),
  };
  return new TextEncoder().encode(`${JSON.stringify(index, null, 1)}\n`);
}
