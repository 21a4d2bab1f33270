// What a memory:// URL names, decoded the same way in Node (a memfs directory) and in a page (a
// key prefix): no node: import, so both builds share it.
import { urlNames } from "@cairn/core/storage";

/**
 * The names a `memory://name/a/b` URL decodes to (`["name", "a", "b"]`): core's `urlNames`, each
 * segment one plain name, so no two spellings (`%2F`, `..%2F`) reach one place.
 */
export function memoryNames(url: URL): string[] {
  return urlNames("memory", url, "volume");
}
