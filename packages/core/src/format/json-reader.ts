import { indexOfByte } from "#platform/format/byte-search.js";

/** Bytes that are not JSON where they stand. */
export class JsonSyntaxError extends Error {}

/** Bytes of a JSON string that are not UTF-8. */
export class JsonEncodingError extends Error {}

// ignoreBOM: a byte-order mark inside the bytes is kept, so JSON.parse refuses it as it would in the text.
const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Strings up to this many bytes are interned: keys, dtypes and kinds repeat in every entry. */
const INTERNED_BYTES = 32;
/** Strings are scanned byte by byte up to this length, beyond it with the native search (one call costs more than a short loop). */
const SHORT_STRING = 64;
/** The intern table is emptied when it holds this many strings, so hostile input cannot grow it without end. */
const INTERNED_MAX = 4096;

/**
 * Reads JSON from bytes value by value, where building the whole tree first (JSON.parse) would
 * cost more than the values a caller keeps: the reading twin of `JsonBytes`. The caller walks the
 * structure it expects (`open`, `more`, `string`, `number`) and takes any other value whole
 * (`value`). Every byte it passes over is checked as JSON; non-ASCII strings are checked as UTF-8.
 * Throws `JsonSyntaxError` and `JsonEncodingError`, never anything the input chose.
 */
export class JsonReader {
  readonly #bytes: Uint8Array;
  readonly #end: number;
  #at: number;
  readonly #interned = new Map<number, string>();

  constructor(bytes: Uint8Array, start = 0, end = bytes.byteLength) {
    this.#bytes = bytes;
    this.#at = start;
    this.#end = end;
  }

  /** Where the next byte is read. */
  get position(): number {
    return this.#at;
  }

  /** Where the bytes this reader reads end. */
  get end(): number {
    return this.#end;
  }

  /** Reads on from `position`, a place between two values that a caller found reading the same bytes. */
  seek(position: number): void {
    if (!(position >= 0 && position <= this.#end)) throw new RangeError(`position ${position} is outside the bytes`);
    this.#at = position;
  }

  /** The string of the bytes `[start, end)`, printable ASCII with no quote or backslash (the caller checked), interned if short. */
  ascii(start: number, end: number): string {
    if (end - start > INTERNED_BYTES) return this.#ascii(start, end);
    let hash = 0;
    for (let at = start; at < end; at++) hash = (Math.imul(hash, 31) + this.#bytes[at]!) | 0;
    return this.#intern(start, end, hash);
  }

  /** The next byte that is not whitespace, not consumed; -1 at the end. */
  peek(): number {
    const bytes = this.#bytes;
    let at = this.#at;
    while (at < this.#end) {
      const c = bytes[at]!;
      if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
      at++;
    }
    this.#at = at;
    return at < this.#end ? bytes[at]! : -1;
  }

  /** Consumes `byte` (after whitespace), or throws. */
  expect(byte: number): void {
    if (this.peek() !== byte) throw this.error(`expected ${String.fromCharCode(byte)}`);
    this.#at++;
  }

  /** Consumes `[` or `{` and says whether the container is empty (its closing byte consumed too). */
  open(byte: 0x5b | 0x7b): boolean {
    this.expect(byte);
    if (this.peek() !== byte + 2) return false;
    this.#at++;
    return true;
  }

  /** After an element: true when a comma follows (consumed), false when the container's `close` does (consumed). */
  more(close: 0x5d | 0x7d): boolean {
    const c = this.peek();
    this.#at++;
    if (c === 0x2c) return true;
    if (c === close) return false;
    this.#at--;
    throw this.error(`expected , or ${String.fromCharCode(close)}`);
  }

  /** Only whitespace is left. */
  finish(): void {
    if (this.peek() !== -1) throw this.error("unexpected bytes after the value");
  }

  /** The next value, whatever it is: strings and numbers read here, containers and literals parsed whole. */
  value(): unknown {
    const c = this.peek();
    if (c === 0x22) return this.string();
    if (c === 0x2d || (c >= 0x30 && c <= 0x39)) return this.number();
    const start = this.#at;
    this.skip();
    return this.parse(start, this.#at);
  }

  /** Whether the next value is a string (whose bytes `stringSpan` or `string` then read). */
  atString(): boolean {
    return this.peek() === 0x22;
  }

  /**
   * Consumes a string of printable ASCII with no escape (what a writer of keys and base64 writes)
   * and gives the position of its closing quote: its bytes run from the opening quote (`position`
   * before the call) + 1 to there. -1, nothing consumed, for any other string or value.
   */
  plainString(): number {
    if (this.peek() !== 0x22) return -1;
    const bytes = this.#bytes;
    for (let at = this.#at + 1; at < this.#end; at++) {
      const c = bytes[at]!;
      if (c === 0x22) {
        this.#at = at + 1;
        return at;
      }
      if (c < 0x20 || c > 0x7e || c === 0x5c) return -1;
    }
    return -1;
  }

  /**
   * Consumes a string with no backslash in it and gives the position of its closing quote, as
   * `plainString` does, without checking its other bytes: for a caller that checks each of them
   * itself (base64). -1, nothing consumed, for any other string or value.
   */
  unescapedString(): number {
    if (this.peek() !== 0x22) return -1;
    const close = closingQuote(this.#bytes, this.#at, this.#end);
    if (close < 0) return -1;
    this.#at = close + 1;
    return close;
  }

  /** A JSON string. Short plain ones are interned, so repeated keys share one string. */
  string(): string {
    if (this.peek() !== 0x22) throw this.error("expected a string");
    const bytes = this.#bytes;
    const start = this.#at + 1;
    let hash = 0;
    for (let at = start; at < this.#end; at++) {
      const c = bytes[at]!;
      if (c === 0x22) {
        this.#at = at + 1;
        return at - start <= INTERNED_BYTES ? this.#intern(start, at, hash) : this.#ascii(start, at);
      }
      if (c < 0x20 || c > 0x7e || c === 0x5c) return this.#escapedString(start - 1);
      hash = (Math.imul(hash, 31) + c) | 0;
    }
    throw this.error("unterminated string");
  }

  /**
   * A JSON number. Whole numbers of up to 15 digits are read here; anything else the grammar
   * allows (fractions, exponents, more digits) is converted by the engine, as JSON.parse would.
   */
  number(): number {
    const bytes = this.#bytes;
    const start = this.peek() === -1 ? this.#end : this.#at;
    let at = start;
    if (bytes[at] === 0x2d) at++;
    const first = at;
    let value = 0;
    while (at < this.#end) {
      const d = bytes[at]! - 0x30;
      if (d < 0 || d > 9) break;
      value = value * 10 + d;
      at++;
    }
    const digits = at - first;
    if (digits === 0 || (digits > 1 && bytes[first] === 0x30)) throw this.error("malformed number");
    let plain = digits <= 15 && first === start;
    if (at < this.#end && bytes[at] === 0x2e) {
      plain = false;
      at = this.#digits(at + 1);
    }
    if (at < this.#end && (bytes[at] === 0x65 || bytes[at] === 0x45)) {
      plain = false;
      at++;
      if (at < this.#end && (bytes[at] === 0x2b || bytes[at] === 0x2d)) at++;
      at = this.#digits(at);
    }
    this.#at = at;
    if (plain) return value;
    return Number(this.#ascii(start, at));
  }

  /** Passes over one value of any kind, checking only that its brackets and strings close. */
  skip(): void {
    const bytes = this.#bytes;
    const c = this.peek();
    if (c === 0x22) {
      this.#at = this.#stringEnd(this.#at);
      return;
    }
    if (c !== 0x5b && c !== 0x7b) {
      // A number or a literal: up to the next delimiter; its grammar is checked where it is parsed.
      let at = this.#at;
      while (at < this.#end) {
        const b = bytes[at]!;
        if (b === 0x2c || b === 0x5d || b === 0x7d || b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09) break;
        at++;
      }
      if (at === this.#at) throw this.error("expected a value");
      this.#at = at;
      return;
    }
    let depth = 0;
    let at = this.#at;
    while (at < this.#end) {
      const b = bytes[at]!;
      if (b === 0x22) {
        at = this.#stringEnd(at);
        continue;
      }
      at++;
      if (b === 0x5b || b === 0x7b) depth++;
      else if ((b === 0x5d || b === 0x7d) && --depth === 0) {
        this.#at = at;
        return;
      }
    }
    throw this.error("unterminated array or object");
  }

  /** JSON.parse of `[start, end)`, its bytes checked as UTF-8 first. */
  parse(start: number, end: number): unknown {
    let text: string;
    try {
      text = UTF8.decode(this.#bytes.subarray(start, end));
    } catch (cause) {
      throw new JsonEncodingError("not UTF-8", { cause });
    }
    try {
      return JSON.parse(text);
    } catch (cause) {
      throw new JsonSyntaxError((cause as Error).message, { cause });
    }
  }

  error(problem: string): JsonSyntaxError {
    return new JsonSyntaxError(`${problem} at byte ${this.#at}`);
  }

  #digits(from: number): number {
    let at = from;
    while (at < this.#end && this.#bytes[at]! >= 0x30 && this.#bytes[at]! <= 0x39) at++;
    if (at === from) throw this.error("malformed number");
    return at;
  }

  /** Just past the string opening at `quote`, whatever it holds. */
  #stringEnd(quote: number): number {
    const bytes = this.#bytes;
    const end = this.#end;
    let at = quote + 1;
    for (const stop = Math.min(end, at + SHORT_STRING); at < stop; at++) {
      const c = bytes[at]!;
      if (c === 0x22) return at + 1;
      if (c === 0x5c) at++;
    }
    // A long string (megabytes of base64): its quotes found with the native search, each the
    // end unless an odd run of backslashes (counted back to the opening quote at most) escapes it.
    for (let from = at; ;) {
      const close = indexOfByte(bytes, 0x22, from, end);
      if (close < 0) break;
      let slashes = 0;
      while (bytes[close - 1 - slashes] === 0x5c) slashes++;
      if (slashes % 2 === 0) return close + 1;
      from = close + 1;
    }
    throw this.error("unterminated string");
  }

  #escapedString(quote: number): string {
    const end = this.#stringEnd(quote);
    const value = this.parse(quote, end) as string;
    this.#at = end;
    return value;
  }

  #ascii(start: number, end: number): string {
    // Printable ASCII (the callers checked): one char code per byte.
    const bytes = this.#bytes;
    if (end - start <= 1024) return String.fromCharCode.apply(null, bytes.subarray(start, end) as unknown as number[]);
    return UTF8.decode(bytes.subarray(start, end));
  }

  #intern(start: number, end: number, hash: number): string {
    const key = hash ^ (end - start);
    const known = this.#interned.get(key);
    if (known !== undefined && known.length === end - start) {
      let same = true;
      for (let i = 0; same && i < known.length; i++) same = known.charCodeAt(i) === this.#bytes[start + i];
      if (same) return known;
    }
    const text = this.#ascii(start, end);
    if (this.#interned.size >= INTERNED_MAX) this.#interned.clear();
    this.#interned.set(key, text);
    return text;
  }
}

/**
 * The closing quote of the string whose opening quote is at `quote` in `bytes[, end)`, if no
 * backslash comes before it; -1 otherwise (no closing quote, or an escape that other code reads).
 * Its other bytes are not checked.
 */
export function closingQuote(bytes: Uint8Array, quote: number, end: number): number {
  const stop = Math.min(end, quote + 1 + SHORT_STRING);
  for (let at = quote + 1; at < stop; at++) {
    const c = bytes[at]!;
    if (c === 0x22) return at;
    if (c === 0x5c) return -1;
  }
  const close = indexOfByte(bytes, 0x22, stop, end);
  if (close < 0) return -1;
  return indexOfByte(bytes, 0x5c, stop, close) >= 0 ? -1 : close;
}
