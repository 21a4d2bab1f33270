/**
 * XXH3-128 (seed 0) of a chunk's bytes as the 32 lowercase hex digits `xxhsum -H2` prints (the
 * canonical, big-endian form): the content hash incremental saves compare (docs/format.md,
 * "Content hashes"). Obtained through `loadXxh128`; every implementation gives the same digits.
 */
export interface Xxh128 {
  /** Which implementation computes it: "native" (xxhash-addon) or "portable" (hash-wasm's WebAssembly). */
  readonly implementation: "native" | "portable";
  hash(bytes: Uint8Array): string;
  /** The digest written as 16 bytes into `out` at `at`, with no string made. */
  hashInto(bytes: Uint8Array, out: Uint8Array, at: number): void;
  /** A hasher fed in pieces: `update` each piece, then `digest`, which also resets it. */
  stream(): Promise<Xxh128Stream>;
}

export interface Xxh128Stream {
  update(bytes: Uint8Array): void;
  digest(): string;
}

/** hash-wasm's `createXXHash128`, as each build imports it. */
export type CreateXxh128 = () => Promise<{
  init(): unknown;
  update(bytes: Uint8Array): unknown;
  digest(format: "hex"): string;
  digest(format: "binary"): Uint8Array;
}>;

/**
 * XXH3-128 in WebAssembly (hash-wasm): no `node:` import, so browsers and workers of any kind run
 * it. Node imports hash-wasm when it first needs it; a browser bundle imports it statically, so
 * the bundler keeps only this algorithm's binary of the package's many.
 */
export async function portableXxh128(createXXHash128: CreateXxh128): Promise<Xxh128> {
  const one = await createXXHash128();
  return {
    implementation: "portable",
    hash(bytes) {
      one.init();
      one.update(bytes);
      return one.digest("hex");
    },
    hashInto(bytes, out, at) {
      one.init();
      one.update(bytes);
      out.set(one.digest("binary"), at);
    },
    async stream() {
      // Each stream its own instance: streams of several chunks may be open at once.
      const hasher = await createXXHash128();
      return {
        update(bytes) {
          hasher.update(bytes);
        },
        digest() {
          const hex = hasher.digest("hex");
          hasher.init();
          return hex;
        },
      };
    },
  };
}
