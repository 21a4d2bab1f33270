/**
 * A growing byte buffer JSON is written into piece by piece, as JSON.stringify would write it:
 * for headers and metadata of 100k tensors, cheaper than building objects or strings to stringify.
 */
export class JsonBytes {
  #buffer: Buffer;
  length: number;

  /** `reserved` bytes at the start are left zero for the caller (a length prefix). */
  constructor(capacity: number, reserved = 0) {
    this.#buffer = Buffer.allocUnsafe(Math.max(capacity, reserved + 16));
    this.#buffer.fill(0, 0, reserved);
    this.length = reserved;
  }

  #ensure(more: number): void {
    if (this.length + more <= this.#buffer.byteLength) return;
    const grown = Buffer.allocUnsafe(Math.max(this.#buffer.byteLength * 2, this.length + more));
    this.#buffer.copy(grown, 0, 0, this.length);
    this.#buffer = grown;
  }

  /** UTF-8 text: ASCII byte by byte (a native write per short piece costs more), anything else through Buffer. */
  text(text: string): void {
    this.#ensure(text.length * 3);
    const buffer = this.#buffer;
    let at = this.length;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c > 0x7f) {
        this.length += buffer.write(text, this.length, "utf8");
        return;
      }
      buffer[at++] = c;
    }
    this.length = at;
  }

  byte(value: number): void {
    this.#ensure(1);
    this.#buffer[this.length++] = value;
  }

  /** A JSON string: printable ASCII without quotes or backslashes byte by byte, anything else through JSON.stringify. */
  string(value: string): void {
    this.#ensure(value.length + 2);
    const buffer = this.#buffer;
    let at = this.length;
    buffer[at++] = 0x22;
    for (let i = 0; i < value.length; i++) {
      const c = value.charCodeAt(i);
      if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return this.text(JSON.stringify(value));
      buffer[at++] = c;
    }
    buffer[at++] = 0x22;
    this.length = at;
  }

  /** A number as JSON.stringify writes it. */
  number(value: number): void {
    if (Number.isSafeInteger(value) && value >= 0) this.integer(value);
    else this.text(JSON.stringify(value));
  }

  /** A non-negative safe integer's decimal digits, as JSON.stringify writes it. */
  integer(value: number): void {
    let digits = 1;
    for (let rest = value; rest >= 10; rest = Math.floor(rest / 10)) digits++;
    this.#ensure(digits);
    let rest = value;
    for (let at = this.length + digits - 1; at >= this.length; at--) {
      this.#buffer[at] = 48 + (rest % 10);
      rest = Math.floor(rest / 10);
    }
    this.length += digits;
  }

  /** The bytes written, copied into a buffer of their own. */
  bytes(): Uint8Array {
    return new Uint8Array(this.#buffer.subarray(0, this.length));
  }

  /** The bytes written, without copying: valid until the next write. */
  view(): Uint8Array {
    return this.#buffer.subarray(0, this.length);
  }
}
