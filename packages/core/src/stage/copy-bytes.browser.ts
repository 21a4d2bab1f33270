// In a browser there is no libc memcpy to call: every copy is a `set`.
export function copyBytes(target: Uint8Array, offset: number, source: Uint8Array): void {
  target.set(source, offset);
}

/** No choice is made in a browser. */
export function copyChoices(): ReadonlyMap<string, "memcpy" | "set" | undefined> {
  return new Map();
}
