/** Arrays of counts many entries share (100k tensors of a few shapes), frozen so none changes under another. */
export class SharedArrays {
  readonly #byHash = new Map<number, readonly number[]>();
  readonly #zeros: (readonly number[])[] = [];

  /** The first `length` numbers of `list` (all of them by default) as a frozen array, an equal one met before if any; `list` is not kept. */
  shared(list: readonly number[], length = list.length): readonly number[] {
    let hash = length;
    for (let i = 0; i < length; i++) hash = (Math.imul(hash, 31) + list[i]!) | 0;
    const known = this.#byHash.get(hash);
    if (known?.length === length) {
      let same = true;
      for (let i = 0; same && i < length; i++) same = known[i] === list[i];
      if (same) return known;
    }
    // Shapes come from metadata: keep a bounded number of them.
    if (this.#byHash.size >= 1024) this.#byHash.clear();
    const frozen = Object.freeze(list.slice(0, length));
    this.#byHash.set(hash, frozen);
    return frozen;
  }

  /** `length` zeros: a whole chunk's offsets. */
  zeros(length: number): readonly number[] {
    if (length > 16) return new Array<number>(length).fill(0);
    return (this.#zeros[length] ??= Object.freeze(new Array<number>(length).fill(0)));
  }
}
