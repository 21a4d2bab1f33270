/**
 * `WriteOptions.onWritten`'s mark for one write: the body's bytes before it were copied or
 * written, and nothing reads them again. Writes from the body's own memory are started in body
 * order and may finish in any order: the mark is the start of the oldest one still running, or,
 * with none running, every byte pulled from the body so far.
 */
export class WrittenMark {
  readonly #running: { readonly at: number; done: boolean }[] = [];
  #head = 0;
  #pulled = 0;
  #told = 0;

  constructor(private readonly report?: (bytes: number) => void) {}

  /** A write from the body's memory at body offset `at` starts; the returned function is called once it settled. */
  writing(at: number): () => void {
    if (!this.report) return () => undefined;
    const entry = { at, done: false };
    this.#running.push(entry);
    return () => {
      entry.done = true;
      this.#tell();
    };
  }

  /** The body's first `bytes` bytes were pulled: copied, or handed to writes (`writing`). */
  pulled(bytes: number): void {
    this.#pulled = bytes;
    this.#tell();
  }

  #tell(): void {
    if (!this.report) return;
    const running = this.#running;
    while (this.#head < running.length && running[this.#head]!.done) this.#head++;
    if (this.#head > 64 && this.#head * 2 > running.length) {
      running.splice(0, this.#head);
      this.#head = 0;
    }
    const mark = this.#head < running.length ? running[this.#head]!.at : this.#pulled;
    if (mark > this.#told) {
      this.#told = mark;
      this.report(mark);
    }
  }
}
